#include "proto/raw_wire.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpc/slice.h"

namespace summon::wire {
namespace {

using google::protobuf::internal::WireFormatLite;

void ReleasePin(void* pin) {
  delete static_cast<std::shared_ptr<const void>*>(pin);
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

grpc::Slice SliceOf(absl::string_view bytes, std::shared_ptr<const void> pin) {
  if (pin == nullptr) return grpc::Slice(bytes.data(), bytes.size());
  // gRPC only reads the slice; its constructor takes a mutable pointer.
  return grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), &ReleasePin,
                     new std::shared_ptr<const void>(std::move(pin)));
}

WritableSlice AllocateSlice(size_t size) {
  // Uninitialised: the caller overwrites every byte. Always on the heap:
  // grpc_slice_malloc keeps a few bytes inside the slice value itself, so
  // `data` would point into a copy that moves.
  grpc_slice raw = grpc_slice_malloc_large(size);
  WritableSlice out;
  out.data = GRPC_SLICE_START_PTR(raw);
  out.slice = grpc::Slice(raw, grpc::Slice::STEAL_REF);
  return out;
}

grpc::ByteBuffer WithBytesField(std::string head, int field_number,
                                grpc::Slice data) {
  std::vector<grpc::Slice> pieces;
  pieces.push_back(std::move(data));
  return WithBytesField(std::move(head), field_number, std::move(pieces));
}

grpc::ByteBuffer WithBytesField(std::string head, int field_number,
                                std::vector<grpc::Slice> data) {
  size_t length = 0;
  for (const grpc::Slice& piece : data) length += piece.size();
  // The field's key and length; its bytes follow in their own slices.
  uint8_t key_and_length[16];
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
      WireFormatLite::MakeTag(field_number,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
      key_and_length);
  end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(length,
                                                                      end);
  head.append(reinterpret_cast<const char*>(key_and_length),
              static_cast<size_t>(end - key_and_length));
  std::vector<grpc::Slice> slices;
  slices.reserve(data.size() + 1);
  slices.emplace_back(head);
  for (grpc::Slice& piece : data) {
    if (piece.size() > 0) slices.push_back(std::move(piece));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status ScanFields(const std::vector<grpc::Slice>& slices,
                        absl::string_view message,
                        absl::FunctionRef<absl::Status(RawField&)> visit) {
  auto malformed = [message](absl::string_view defect) {
    return absl::InternalError(
        absl::StrCat("malformed ", message, " message: ", defect));
  };
  SliceCursor cursor(slices);
  RawField field;
  while (!cursor.done()) {
    uint64_t key = 0;
    if (!cursor.ReadVarint(&key)) return malformed("truncated field key");
    field.number = static_cast<uint32_t>(key >> 3);
    if (key >> 3 == 0) return malformed("field number 0");
    field.length_delimited = false;
    field.varint = 0;
    field.length = 0;
    field.pieces.clear();
    switch (key & 7) {
      case WireFormatLite::WIRETYPE_VARINT:
        if (!cursor.ReadVarint(&field.varint)) {
          return malformed("truncated varint");
        }
        break;
      case WireFormatLite::WIRETYPE_FIXED64:
        if (!cursor.Take(8, nullptr)) return malformed("truncated fixed64");
        continue;
      case WireFormatLite::WIRETYPE_FIXED32:
        if (!cursor.Take(4, nullptr)) return malformed("truncated fixed32");
        continue;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
        field.length_delimited = true;
        if (!cursor.ReadVarint(&field.length)) {
          return malformed("truncated length");
        }
        if (!cursor.Take(field.length, &field.pieces)) {
          return malformed(
              absl::StrCat("field ", field.number, " runs past the message"));
        }
        break;
      default:
        return malformed(absl::StrCat("wire type ", key & 7));
    }
    if (absl::Status visited = visit(field); !visited.ok()) return visited;
  }
  return absl::OkStatus();
}

std::string Joined(const RawField& field) {
  std::string joined;
  joined.reserve(field.length);
  for (absl::string_view piece : field.pieces) {
    joined.append(piece.data(), piece.size());
  }
  return joined;
}

}  // namespace summon::wire
