#ifndef SUMMON_MEMORY_PARALLEL_COPY_H_
#define SUMMON_MEMORY_PARALLEL_COPY_H_

// Large copies split across the machine's cores. One thread's memcpy between
// shared-memory segments (4 KiB pages: shmem has no transparent huge pages
// here) ran at ~5 GB/s on this project's 2-vCPU VM, and a writeback of
// 256 MiB makes two such copies (session copy -> staging, staging -> shard,
// R8); two threads copying halves reach ~1.3-1.8x that (bench/RESULTS.md,
// "Writeback copies on every core", issue 22). Small copies stay on the
// calling thread: a thread start costs tens of microseconds.

#include <cstdint>

namespace summon::memory {

// Copies of fewer bytes than this run on the calling thread.
inline constexpr int64_t kParallelCopyMinBytes = int64_t{8} << 20;

// How many threads a large copy uses: the cores this process may run on,
// at most 4 (memory bandwidth, not cores, limits beyond that).
int ParallelCopyThreads();

// memcpy(to, from, bytes) for ranges that do not overlap; pieces of at least
// kParallelCopyMinBytes / 2 are copied by up to ParallelCopyThreads()
// threads at once, the calling thread taking the first piece. Returns when
// every byte is copied.
void ParallelCopy(void* to, const void* from, int64_t bytes);

}  // namespace summon::memory

#endif  // SUMMON_MEMORY_PARALLEL_COPY_H_
