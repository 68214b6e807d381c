#ifndef SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_
#define SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_

// A caller's shared-memory buffer, mapped for one ReadSlices answer
// (weight_sync.proto, ReadSlicesRequest.local_buffer): a 64-byte header,
// then the packed entries. Everything is checked before the first byte is
// written, and the header says "complete" only once every entry is whole,
// so a failed read never leaves anything the caller can take for data.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace summon::server {

inline constexpr int64_t kSliceBufferHeaderBytes = 64;

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
  // Unmaps `buffer` on a thread of its own, for a caller that is done
  // writing into it: the unmap of a large answer's pages (~45 ms for 2 GB
  // on this project's machine) need not hold up the reply.
  static void UnmapLater(SliceBuffer buffer);

 private:
  SliceBuffer(uint8_t* base, int64_t size) : base_(base), size_(size) {}

  uint8_t* base_;
  int64_t size_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_H_
