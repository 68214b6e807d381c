#include "proto/version_chunk_wire.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/raw_wire.h"

namespace summon::wire {

grpc::ByteBuffer EncodeVersionChunk(grpc::Slice data) {
  return WithBytesField(std::string(),
                        v1::NodeReadVersionResponse::kDataFieldNumber,
                        std::move(data));
}

grpc::ByteBuffer EncodeVersionChunk(std::vector<grpc::Slice> pieces) {
  return WithBytesField(std::string(),
                        v1::NodeReadVersionResponse::kDataFieldNumber,
                        std::move(pieces));
}

absl::Status DecodeVersionChunk(const grpc::ByteBuffer& message,
                                VersionChunkView* chunk) {
  chunk->data_bytes = 0;
  chunk->data.clear();
  chunk->slices.clear();
  if (grpc::Status dumped = message.Dump(&chunk->slices); !dumped.ok()) {
    return absl::InternalError(absl::StrCat(
        "malformed NodeReadVersion message: ", dumped.error_message()));
  }
  return ScanFields(
      chunk->slices, "NodeReadVersion",
      [chunk](RawField& field) -> absl::Status {
        if (field.number == v1::NodeReadVersionResponse::kDataFieldNumber &&
            field.length_delimited) {
          // The last value wins, as protobuf's does.
          chunk->data = std::move(field.pieces);
          chunk->data_bytes = static_cast<int64_t>(field.length);
        }
        return absl::OkStatus();
      });
}

std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawNodeReadVersion(
    grpc::ChannelInterface* channel, grpc::ClientContext* context,
    const v1::NodeReadVersionRequest& request) {
  static const grpc::internal::RpcMethod kNodeReadVersion(
      "/summon.v1.Peer/NodeReadVersion",
      grpc::internal::RpcMethod::SERVER_STREAMING);
  return StartRawServerStream(channel, kNodeReadVersion, context, request);
}

}  // namespace summon::wire
