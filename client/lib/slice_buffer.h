#ifndef SUMMON_CLIENT_LIB_SLICE_BUFFER_H_
#define SUMMON_CLIENT_LIB_SLICE_BUFFER_H_

// A same-host shared-memory buffer that ReadSlices answers into
// (docs/api.md#weight-sync; Python's summon.SliceBuffer): a memfd sealed
// against shrinking, handed to the daemon's broker socket with the call's
// token, into which the daemon copies each slice from its shards. Its
// 64-byte header (weight_sync.proto, SliceBufferHeader) says "complete"
// only after the last entry, so a failed read leaves nothing that reads as
// data. Reused read after read: the packed bytes of the last read stay
// valid until the next read into it.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::client {

inline constexpr int64_t kSliceBufferHeaderBytes = 64;

class SliceBuffer {
 public:
  // `capacity` bytes of packed slices after the header.
  static absl::StatusOr<SliceBuffer> Create(int64_t capacity);
  SliceBuffer(SliceBuffer&& other) noexcept;
  SliceBuffer& operator=(SliceBuffer&& other) noexcept;
  SliceBuffer(const SliceBuffer&) = delete;
  SliceBuffer& operator=(const SliceBuffer&) = delete;
  ~SliceBuffer();

  int64_t capacity() const { return size_ - kSliceBufferHeaderBytes; }
  // The packed answer (entry i at its SliceLayout.offset).
  const uint8_t* packed() const { return base_ + kSliceBufferHeaderBytes; }
  uint8_t* mutable_packed() { return base_ + kSliceBufferHeaderBytes; }
  // The header as the last read left it.
  bool complete() const;
  int64_t total_bytes() const;
  absl::string_view call() const;  // The first 8 bytes of the call's token.
  absl::string_view magic() const;

  // Sends the memfd with `token` to the broker socket ("@name": abstract)
  // of the ReadSlices call that granted it. UNAVAILABLE when the socket is
  // out of reach, FAILED_PRECONDITION with the daemon's reason when it
  // refuses the buffer.
  absl::Status HandOver(absl::string_view socket,
                        absl::string_view token) const;

  // For an answer that came as data messages (a daemon on another host):
  // the same header protocol, kept by this process.
  void Begin(int64_t version, int64_t total_bytes, int64_t entries);
  void Complete();

 private:
  SliceBuffer(int fd, uint8_t* base, int64_t size)
      : fd_(fd), base_(base), size_(size) {}
  void Release();

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_SLICE_BUFFER_H_
