// Peer.NodeReadVersion's replies (summon.v1.NodeReadVersionResponse) as raw
// gRPC byte buffers: the sending node reads a version's pieces straight into
// the slice gRPC sends, and the reading node copies them from the received
// slices to their places, with no protobuf copy on either side.

#ifndef SUMMON_PROTO_VERSION_CHUNK_WIRE_H_
#define SUMMON_PROTO_VERSION_CHUNK_WIRE_H_

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
#include "summon/v1/weight_sync.pb.h"

namespace summon::wire {

// One NodeReadVersionResponse holding `data` (see raw_wire's AllocateSlice),
// or the concatenation of `pieces` (raw_wire's SliceOf: pinned ones are
// sent from the caller's memory).
grpc::ByteBuffer EncodeVersionChunk(grpc::Slice data);
grpc::ByteBuffer EncodeVersionChunk(std::vector<grpc::Slice> pieces);

// A received NodeReadVersionResponse: `data` lists its bytes in order as
// views into `slices`, valid while this object lives.
struct VersionChunkView {
  int64_t data_bytes = 0;
  std::vector<absl::string_view> data;
  std::vector<grpc::Slice> slices;
};

// Any valid encoding; INTERNAL naming the defect for a malformed message.
absl::Status DecodeVersionChunk(const grpc::ByteBuffer& message,
                                VersionChunkView* chunk);

// Peer.NodeReadVersion with replies as raw byte buffers.
std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawNodeReadVersion(
    grpc::ChannelInterface* channel, grpc::ClientContext* context,
    const v1::NodeReadVersionRequest& request);

}  // namespace summon::wire

#endif  // SUMMON_PROTO_VERSION_CHUNK_WIRE_H_
