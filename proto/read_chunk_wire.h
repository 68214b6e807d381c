// ReadTensor's reply messages (summon.v1.ReadTensorResponse) as raw gRPC
// byte buffers, so that a tensor's bytes are not copied by protobuf on
// either side of the stream.
//
// The server builds each message from two slices: a small header (the
// tensor's description in the first message, the element offset, the data
// field's tag and length) and the data itself, which either references the
// session's memory while gRPC sends it (`pin` keeps that memory alive) or is
// copied once into the slice. The client reads the data straight out of the
// received slices. The bytes on the wire are an ordinary ReadTensorResponse:
// stock protobuf clients (Python, grpcurl) and servers interoperate.

#ifndef SUMMON_PROTO_READ_CHUNK_WIRE_H_
#define SUMMON_PROTO_READ_CHUNK_WIRE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/summon/v1/summon.pb.h"

namespace summon::wire {

// One ReadTensorResponse on the wire. `info` is set in the first message of
// a stream only. With `pin`, `bytes` must stay unchanged while any copy of
// `pin` is held: the message references them and holds `pin` until gRPC has
// sent it. Without, the bytes are copied into the message.
grpc::ByteBuffer EncodeReadChunk(const v1::TensorInfo* info,
                                 int64_t element_offset,
                                 absl::string_view bytes,
                                 std::shared_ptr<const void> pin);

// A received ReadTensorResponse whose data stays in gRPC's slices: `data`
// lists the pieces of the data field in order (a piece may end inside an
// element), valid while this object lives.
struct ReadChunkView {
  bool has_info = false;
  v1::TensorInfo info;
  int64_t element_offset = 0;
  int64_t data_bytes = 0;  // Of all pieces together.
  std::vector<absl::string_view> data;
  std::vector<grpc::Slice> slices;  // Owns what `data` points into.
};

// Parses any valid encoding of a ReadTensorResponse (fields in any order,
// repeated fields merged as protobuf does, unknown fields skipped);
// INTERNAL naming the defect for a malformed message.
absl::Status DecodeReadChunk(const grpc::ByteBuffer& message,
                             ReadChunkView* chunk);

// Summon.ReadTensor with replies as raw byte buffers, for DecodeReadChunk.
std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawReadTensor(
    grpc::ChannelInterface* channel, grpc::ClientContext* context,
    const v1::ReadTensorRequest& request);

}  // namespace summon::wire

#endif  // SUMMON_PROTO_READ_CHUNK_WIRE_H_
