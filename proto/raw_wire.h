// Replies that carry one large bytes field, as raw gRPC byte buffers: the
// bytes are neither serialised into a protobuf on the sender nor parsed
// into a string on the receiver. ReadTensor's chunks (read_chunk_wire) and
// Peer.NodeReadVersion's (version_chunk_wire) are built on this.
//
// A message is sent as two slices: its small fields serialised as usual,
// then the bytes field's key and length and the bytes in a slice of their
// own. The bytes on the wire are an ordinary protobuf message, so stock
// protobuf peers (Python, grpcurl) interoperate.

#ifndef SUMMON_PROTO_RAW_WIRE_H_
#define SUMMON_PROTO_RAW_WIRE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // Serialises the request.
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/sync_stream.h"

namespace summon::wire {

// A slice holding `bytes`. With `pin` it references them (no copy) and
// holds `pin` until gRPC lets the slice go, so they must stay unchanged
// while any copy of `pin` is held; without, they are copied into it.
grpc::Slice SliceOf(absl::string_view bytes, std::shared_ptr<const void> pin);

// A slice of `size` bytes to be filled before it is handed to
// WithBytesField (the only copy a sender makes of data it must convert).
struct WritableSlice {
  grpc::Slice slice;
  uint8_t* data = nullptr;
};
WritableSlice AllocateSlice(size_t size);

// The message whose other fields serialise to `head`, followed by bytes
// field `field_number` holding `data`.
grpc::ByteBuffer WithBytesField(std::string head, int field_number,
                                grpc::Slice data);
// The same with the field's bytes in several slices, in order (each one
// copied or referenced as SliceOf made it).
grpc::ByteBuffer WithBytesField(std::string head, int field_number,
                                std::vector<grpc::Slice> data);

// One field of a received message. A length-delimited field's bytes are
// listed as views into the message's slices (a view may end anywhere).
struct RawField {
  uint32_t number = 0;
  bool length_delimited = false;
  uint64_t varint = 0;  // A varint field's value.
  uint64_t length = 0;  // A length-delimited field's byte count.
  std::vector<absl::string_view> pieces;
};

// Visits every varint and length-delimited field of the message made of
// `slices`, in order; fixed-width fields are skipped. A malformed message
// is INTERNAL "malformed <message> message: <defect>"; an error from
// `visit` ends the scan and is returned.
absl::Status ScanFields(const std::vector<grpc::Slice>& slices,
                        absl::string_view message,
                        absl::FunctionRef<absl::Status(RawField&)> visit);

// A length-delimited field's pieces joined (for small nested messages).
std::string Joined(const RawField& field);

// A server-streaming call whose replies are read as raw byte buffers.
template <typename Request>
std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawServerStream(
    grpc::ChannelInterface* channel, const grpc::internal::RpcMethod& method,
    grpc::ClientContext* context, const Request& request) {
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel, method, context, request));
}

}  // namespace summon::wire

#endif  // SUMMON_PROTO_RAW_WIRE_H_
