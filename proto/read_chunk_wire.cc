#include "proto/read_chunk_wire.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/rpc_method.h"

namespace summon::wire {
namespace {

using google::protobuf::internal::WireFormatLite;

void ReleasePin(void* pin) {
  delete static_cast<std::shared_ptr<const void>*>(pin);
}

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("malformed ReadTensor message: ", what));
}

// Reads protobuf's wire format across the slices of a received message
// without joining them.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    SkipEmpty();
  }

  bool done() const { return slice_ == slices_.size(); }

  // False at the end or after ten bytes without a last byte.
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64 && !done(); shift += 7) {
      const uint8_t byte = slices_[slice_].begin()[at_];
      Advance(1);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // The next `n` bytes as views into the slices (appended to `pieces`
  // unless null); false when fewer remain.
  bool Take(uint64_t n, std::vector<absl::string_view>* pieces) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& slice = slices_[slice_];
      const size_t here = std::min<uint64_t>(n, slice.size() - at_);
      if (pieces != nullptr) {
        pieces->emplace_back(reinterpret_cast<const char*>(slice.begin()) + at_,
                             here);
      }
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    at_ += n;
    if (at_ == slices_[slice_].size()) {
      ++slice_;
      at_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && slices_[slice_].size() == 0) ++slice_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t at_ = 0;
};

}  // namespace

grpc::ByteBuffer EncodeReadChunk(const v1::TensorInfo* info,
                                 int64_t element_offset,
                                 absl::string_view bytes,
                                 std::shared_ptr<const void> pin) {
  v1::ReadTensorResponse head;
  if (info != nullptr) *head.mutable_info() = *info;
  head.set_element_offset(element_offset);
  std::string header = head.SerializeAsString();
  // The data field's key and length; its bytes follow in their own slice.
  uint8_t key_and_length[16];
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
      WireFormatLite::MakeTag(v1::ReadTensorResponse::kDataFieldNumber,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
      key_and_length);
  end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(
      bytes.size(), end);
  header.append(reinterpret_cast<const char*>(key_and_length),
                static_cast<size_t>(end - key_and_length));
  if (bytes.empty()) {
    grpc::Slice only(header);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice()};
  if (pin != nullptr) {
    // gRPC only reads the slice; its constructor takes a mutable pointer.
    slices[1] =
        grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), &ReleasePin,
                    new std::shared_ptr<const void>(std::move(pin)));
  } else {
    slices[1] = grpc::Slice(bytes.data(), bytes.size());
  }
  return grpc::ByteBuffer(slices, 2);
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
    return Malformed(dumped.error_message());
  }
  SliceCursor cursor(chunk->slices);
  while (!cursor.done()) {
    uint64_t key = 0;
    if (!cursor.ReadVarint(&key)) return Malformed("truncated field key");
    const uint64_t field = key >> 3;
    if (field == 0) return Malformed("field number 0");
    uint64_t value = 0;
    switch (key & 7) {
      case WireFormatLite::WIRETYPE_VARINT:
        if (!cursor.ReadVarint(&value)) return Malformed("truncated varint");
        if (field == v1::ReadTensorResponse::kElementOffsetFieldNumber) {
          chunk->element_offset = static_cast<int64_t>(value);
        }
        break;
      case WireFormatLite::WIRETYPE_FIXED64:
        if (!cursor.Take(8, nullptr)) return Malformed("truncated fixed64");
        break;
      case WireFormatLite::WIRETYPE_FIXED32:
        if (!cursor.Take(4, nullptr)) return Malformed("truncated fixed32");
        break;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        if (!cursor.ReadVarint(&value)) return Malformed("truncated length");
        std::vector<absl::string_view> pieces;
        if (!cursor.Take(value, &pieces)) {
          return Malformed(
              absl::StrCat("field ", field, " runs past the message"));
        }
        if (field == v1::ReadTensorResponse::kDataFieldNumber) {
          // A repeated bytes field keeps its last value, as protobuf does.
          chunk->data = std::move(pieces);
          chunk->data_bytes = static_cast<int64_t>(value);
        } else if (field == v1::ReadTensorResponse::kInfoFieldNumber) {
          std::string joined;
          for (absl::string_view piece : pieces) {
            joined.append(piece.data(), piece.size());
          }
          if (!chunk->info.MergeFromString(joined)) {
            return Malformed("tensor info does not parse");
          }
          chunk->has_info = true;
        }
        break;
      }
      default:
        return Malformed(absl::StrCat("wire type ", key & 7));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawReadTensor(
    grpc::ChannelInterface* channel, grpc::ClientContext* context,
    const v1::ReadTensorRequest& request) {
  static const grpc::internal::RpcMethod kReadTensor(
      "/summon.v1.Summon/ReadTensor",
      grpc::internal::RpcMethod::SERVER_STREAMING);
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel, kReadTensor, context, request));
}

}  // namespace summon::wire
