#include "proto/version_chunk_wire.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "proto/raw_wire.h"
#include "proto/wire_test_buffers.h"

namespace summon::wire {
namespace {

// Every byte value, twice over: a chunk of a bf16 version as it would be.
std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  return bytes;
}

TEST(VersionChunkWire, TheSenderFillsTheSliceGrpcSendsAndTheReceiverReadsIt) {
  const std::string bytes = Pattern(512);
  WritableSlice slice = AllocateSlice(bytes.size());
  ASSERT_EQ(slice.slice.size(), 512u);
  std::memcpy(slice.data, bytes.data(), bytes.size());
  const uint8_t* sent_from = slice.data;
  grpc::ByteBuffer message = EncodeVersionChunk(std::move(slice.slice));
  VersionChunkView chunk;
  ASSERT_TRUE(DecodeVersionChunk(message, &chunk).ok());
  EXPECT_EQ(chunk.data_bytes, 512);
  ASSERT_EQ(chunk.data.size(), 1u);
  // No copy on either side: the view is the memory the sender filled.
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(chunk.data[0].data()), sent_from);
  EXPECT_EQ(chunk.data[0], bytes);
}

TEST(VersionChunkWire, PinnedAndFilledPiecesTravelAsOneDataField) {
  auto kept = std::make_shared<std::string>(Pattern(40000));
  const std::string middle = Pattern(300).substr(5);
  WritableSlice filled = AllocateSlice(middle.size());
  std::memcpy(filled.data, middle.data(), middle.size());
  std::vector<grpc::Slice> pieces;
  pieces.push_back(SliceOf(absl::string_view(*kept).substr(0, 20000), kept));
  pieces.push_back(std::move(filled.slice));
  pieces.push_back(grpc::Slice());  // Empty pieces are left out.
  pieces.push_back(SliceOf(absl::string_view(*kept).substr(30000), kept));
  VersionChunkView chunk;
  {
    grpc::ByteBuffer message = EncodeVersionChunk(std::move(pieces));
    EXPECT_EQ(kept.use_count(), 3);  // Held by the message's two slices.
    ASSERT_TRUE(DecodeVersionChunk(message, &chunk).ok());
    v1::NodeReadVersionResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flat(message)));
    EXPECT_EQ(parsed.data(),
              kept->substr(0, 20000) + middle + kept->substr(30000));
  }
  EXPECT_EQ(chunk.data_bytes, static_cast<int64_t>(30000 + middle.size()));
  EXPECT_EQ(Joined(chunk.data),
            kept->substr(0, 20000) + middle + kept->substr(30000));
  // Sent from the kept memory itself, and held until the view goes.
  EXPECT_EQ(chunk.data.front().data(), kept->data());
  EXPECT_EQ(kept.use_count(), 3);
  chunk = VersionChunkView();
  EXPECT_EQ(kept.use_count(), 1);
}

TEST(VersionChunkWire, ATinyChunkIsFilledWhereItIsSent) {
  // Fewer bytes than a slice keeps inline (a bf16 piece of a few elements):
  // the filled memory must be the one that travels.
  for (size_t size : {1, 8, 23, 24, 100}) {
    WritableSlice slice = AllocateSlice(size);
    const std::string bytes = Pattern(size);
    std::memcpy(slice.data, bytes.data(), size);
    WritableSlice moved = std::move(slice);
    grpc::ByteBuffer message = EncodeVersionChunk(std::move(moved.slice));
    VersionChunkView chunk;
    ASSERT_TRUE(DecodeVersionChunk(message, &chunk).ok()) << size;
    EXPECT_EQ(Joined(chunk.data), bytes) << size;
  }
}

TEST(VersionChunkWire, EncodedMessageIsAnOrdinaryNodeReadVersionResponse) {
  const std::string bytes = Pattern(1 << 20);
  v1::NodeReadVersionResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(
      Flat(EncodeVersionChunk(grpc::Slice(bytes.data(), bytes.size())))));
  EXPECT_EQ(parsed.data(), bytes);
  ASSERT_TRUE(parsed.ParseFromString(Flat(EncodeVersionChunk(grpc::Slice()))));
  EXPECT_EQ(parsed.data(), "");
}

TEST(VersionChunkWire, DecodesProtobufsOwnEncodingCutAtAnyByte) {
  v1::NodeReadVersionResponse message;
  message.set_data(Pattern(4096));
  const std::string wire = message.SerializeAsString();
  for (size_t size : {1, 2, 3, 7, 4095, 4096, 100000}) {
    VersionChunkView chunk;
    ASSERT_TRUE(DecodeVersionChunk(Sliced(wire, size), &chunk).ok()) << size;
    EXPECT_EQ(chunk.data_bytes, 4096) << size;
    EXPECT_EQ(Joined(chunk.data), message.data()) << size;
  }
}

TEST(VersionChunkWire, KeepsTheLastDataAndSkipsUnknownFields) {
  v1::NodeReadVersionResponse first;
  first.set_data("old bytes");
  v1::NodeReadVersionResponse second;
  second.set_data("new");
  // Unknown fields: 9 varint, 10 fixed32, 11 fixed64, 12 bytes.
  const std::string unknown =
      std::string("\x48\x96\x01", 3) + std::string("\x55\x01\x02\x03\x04", 5) +
      std::string("\x59\x01\x02\x03\x04\x05\x06\x07\x08", 9) +
      std::string("\x62\x02hi", 4);
  VersionChunkView chunk;
  ASSERT_TRUE(DecodeVersionChunk(Sliced(first.SerializeAsString() + unknown +
                                            second.SerializeAsString(),
                                        3),
                                 &chunk)
                  .ok());
  EXPECT_EQ(Joined(chunk.data), "new");
  EXPECT_EQ(chunk.data_bytes, 3);
  // A varint under the data field's number is not data.
  ASSERT_TRUE(
      DecodeVersionChunk(Sliced(std::string("\x08\x05", 2), 1), &chunk).ok());
  EXPECT_EQ(chunk.data_bytes, 0);
  EXPECT_TRUE(chunk.data.empty());
}

TEST(VersionChunkWire, MalformedMessagesAreInternalErrorsNamingTheDefect) {
  const struct {
    std::string wire;
    const char* defect;
  } cases[] = {
      {std::string("\x0a\x05"
                   "abc",
                   5),
       "field 1 runs past the message"},
      {std::string("\x0a", 1), "truncated length"},
      {std::string("\x08\x96", 2), "truncated varint"},
      {std::string("\x0d\x01\x02", 3), "truncated fixed32"},
      {std::string("\x0f", 1), "wire type 7"},
      {std::string("\x00\x01", 2), "field number 0"},
  };
  for (const auto& c : cases) {
    VersionChunkView chunk;
    const absl::Status status = DecodeVersionChunk(Sliced(c.wire, 1), &chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << c.defect;
    EXPECT_EQ(status.message(),
              std::string("malformed NodeReadVersion message: ") + c.defect);
  }
}

}  // namespace
}  // namespace summon::wire
