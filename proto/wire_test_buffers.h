// Byte buffers for the raw wire tests (read_chunk_wire_test,
// version_chunk_wire_test): a message flattened, cut into slices the way
// frames arrive, and received pieces joined.

#ifndef SUMMON_PROTO_WIRE_TEST_BUFFERS_H_
#define SUMMON_PROTO_WIRE_TEST_BUFFERS_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace summon::wire {

inline std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string all;
  for (const grpc::Slice& slice : slices) {
    all.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return all;
}

// The same bytes cut into slices of `size` (the way frames arrive).
inline grpc::ByteBuffer Sliced(const std::string& bytes, size_t size) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += size) {
    slices.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

inline std::string Joined(const std::vector<absl::string_view>& pieces) {
  std::string all;
  for (absl::string_view piece : pieces) all.append(piece.data(), piece.size());
  return all;
}

}  // namespace summon::wire

#endif  // SUMMON_PROTO_WIRE_TEST_BUFFERS_H_
