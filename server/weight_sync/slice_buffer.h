#ifndef SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_
#define SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_

// A caller's shared-memory buffer, mapped for one ReadSlices answer
// (weight_sync.proto, ReadSlicesRequest.local_buffer): a 64-byte header,
// then the packed entries. Everything is checked before the first byte is
// written, and the header says "complete" only once every entry is whole,
// so a failed read never leaves anything the caller can take for data.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace summon::server {

inline constexpr int64_t kSliceBufferHeaderBytes = 64;

// One mmap of a caller's buffer, unmapped when the last holder lets go.
class SliceMapping {
 public:
  SliceMapping(uint8_t* base, int64_t size) : base_(base), size_(size) {}
  SliceMapping(const SliceMapping&) = delete;
  SliceMapping& operator=(const SliceMapping&) = delete;
  ~SliceMapping();
  uint8_t* base() const { return base_; }
  int64_t size() const { return size_; }

 private:
  uint8_t* const base_;
  const int64_t size_;
};

// What identifies a caller's buffer while it is mapped: its inode (the
// mapping keeps the memory, so the inode cannot be reused meanwhile).
struct SliceBufferIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  int64_t size = 0;  // Of the file.
};

class SliceBuffer {
 public:
  // Takes `fd`. INVALID_ARGUMENT when it is not shared memory (memfd,
  // /dev/shm), is sealed against writes, is not sealed against shrinking
  // (the caller could cut it under the daemon's writes), or is smaller than
  // the header + `total_bytes`: then naming the first entry (`names[i]`,
  // placed at offsets[i] with bytes[i]) that does not fit. Maps it shared,
  // read-write, pages populated.
  static absl::StatusOr<SliceBuffer> Map(int fd, int64_t total_bytes,
                                         const std::vector<std::string>& names,
                                         const std::vector<int64_t>& offsets,
                                         const std::vector<int64_t>& bytes);
  // Map's checks alone: the buffer's identity, `fd` kept open; on a
  // refusal `fd` is closed.
  static absl::StatusOr<SliceBufferIdentity> Check(
      int fd, int64_t total_bytes, const std::vector<std::string>& names,
      const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes);
  // Maps a checked `fd` (taken) of `size` bytes, pages populated.
  static absl::StatusOr<std::shared_ptr<SliceMapping>> MapChecked(
      int fd, int64_t size);
  // An answer of `total_bytes` written through `mapping` (at least the
  // header + total_bytes long).
  SliceBuffer(std::shared_ptr<SliceMapping> mapping, int64_t total_bytes)
      : mapping_(std::move(mapping)),
        base_(mapping_->base()),
        size_(kSliceBufferHeaderBytes + total_bytes) {}

  SliceBuffer(SliceBuffer&& other) noexcept;
  SliceBuffer& operator=(SliceBuffer&&) = delete;
  SliceBuffer(const SliceBuffer&) = delete;
  ~SliceBuffer();

  // Writes the header with state 0 ("being written"): before any entry.
  void Begin(int64_t version, int64_t entries, const std::string& call);
  // The packed answer: entry i at data() + offsets[i].
  uint8_t* data() { return base_ + kSliceBufferHeaderBytes; }
  // State 1, after every entry's bytes (a release store: a reader that
  // sees 1 sees the entries).
  void Complete();
  // Drops `buffer` on a thread of its own, for a caller that is done
  // writing into it: the unmap of a large answer's pages (~45 ms for 2 GB
  // on this project's machine) need not hold up the reply.
  static void UnmapLater(SliceBuffer buffer);

 private:
  std::shared_ptr<SliceMapping> mapping_;
  uint8_t* base_;
  int64_t size_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_
