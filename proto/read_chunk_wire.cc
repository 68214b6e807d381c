#include "proto/read_chunk_wire.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/raw_wire.h"

namespace summon::wire {

grpc::ByteBuffer EncodeReadChunk(const v1::TensorInfo* info,
                                 int64_t element_offset,
                                 absl::string_view bytes,
                                 std::shared_ptr<const void> pin) {
  v1::ReadTensorResponse head;
  if (info != nullptr) *head.mutable_info() = *info;
  head.set_element_offset(element_offset);
  return WithBytesField(head.SerializeAsString(),
                        v1::ReadTensorResponse::kDataFieldNumber,
                        SliceOf(bytes, std::move(pin)));
}

absl::Status DecodeReadChunk(const grpc::ByteBuffer& message,
                             ReadChunkView* chunk) {
  chunk->has_info = false;
  chunk->info.Clear();
  chunk->element_offset = 0;
  chunk->data_bytes = 0;
  chunk->data.clear();
  chunk->slices.clear();
  if (grpc::Status dumped = message.Dump(&chunk->slices); !dumped.ok()) {
    return absl::InternalError(
        absl::StrCat("malformed ReadTensor message: ", dumped.error_message()));
  }
  return ScanFields(
      chunk->slices, "ReadTensor", [chunk](RawField& field) -> absl::Status {
        if (field.number == v1::ReadTensorResponse::kElementOffsetFieldNumber &&
            !field.length_delimited) {
          chunk->element_offset = static_cast<int64_t>(field.varint);
        } else if (field.number == v1::ReadTensorResponse::kDataFieldNumber &&
                   field.length_delimited) {
          // A repeated bytes field keeps its last value, as protobuf does.
          chunk->data = std::move(field.pieces);
          chunk->data_bytes = static_cast<int64_t>(field.length);
        } else if (field.number == v1::ReadTensorResponse::kInfoFieldNumber &&
                   field.length_delimited) {
          if (!chunk->info.MergeFromString(Joined(field))) {
            return absl::InternalError(
                "malformed ReadTensor message: tensor info does not parse");
          }
          chunk->has_info = true;
        }
        return absl::OkStatus();
      });
}

std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawReadTensor(
    grpc::ChannelInterface* channel, grpc::ClientContext* context,
    const v1::ReadTensorRequest& request) {
  static const grpc::internal::RpcMethod kReadTensor(
      "/summon.v1.Summon/ReadTensor",
      grpc::internal::RpcMethod::SERVER_STREAMING);
  return StartRawServerStream(channel, kReadTensor, context, request);
}

}  // namespace summon::wire
