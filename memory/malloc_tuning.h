// glibc malloc's settings for a daemon that streams: summond's gRPC
// receive buffers and the 1 MiB chunks weight sync sends between nodes are
// allocated and freed thousands of times a second on many threads.

#ifndef SUMMON_MEMORY_MALLOC_TUNING_H_
#define SUMMON_MEMORY_MALLOC_TUNING_H_

#include <cstddef>

namespace summon::memory {

// Blocks up to this size come from malloc's arenas, not fresh mmaps.
inline constexpr size_t kArenaBlockMaxBytes = size_t{32} << 20;
// Freed memory at an arena's top is handed back once it passes this.
inline constexpr size_t kArenaKeepFreeBytes = size_t{64} << 20;

// With glibc's defaults each freed arena top goes back to the kernel
// (madvise) and blocks past a moving threshold get a fresh mmap, so every
// chunk's pages fault in again: a 2-node pull of 1 GB spent ~8 % of both
// daemons' CPU in madvise/munmap and as much again in page faults
// (bench/RESULTS.md, "The peer path without protobuf copies"). This keeps
// up to kArenaKeepFreeBytes free per arena instead. False when malloc
// refused (another allocator, such as a sanitizer's, stands in for
// glibc's).
bool KeepFreedMemoryForReuse();

}  // namespace summon::memory

#endif  // SUMMON_MEMORY_MALLOC_TUNING_H_
