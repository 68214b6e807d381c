#ifndef SUMMON_MEMORY_FRESH_MEMORY_H_
#define SUMMON_MEMORY_FRESH_MEMORY_H_

// Large buffers that do not fault page by page. A fresh anonymous mapping is
// faulted in (and zeroed by the kernel) one 4 KiB page at a time on first
// write: on this project's 2-vCPU VM about 0.3-1.4 GB/s, against 10+ GB/s
// for a memcpy into mapped pages (bench/RESULTS.md, issue 22). With
// madvise(MADV_HUGEPAGE) on a 2 MiB aligned range each fault maps a whole
// 2 MiB page where the kernel's transparent huge pages are `always` or
// `madvise` (/sys/kernel/mm/transparent_hugepage/enabled). Where they are
// `never`, or the kernel has none, the madvise is refused or ignored and
// the memory behaves as plain anonymous memory: correct, only slower to
// touch the first time. Shared memory (shm, memfd) is governed by
// shmem_enabled instead, `never` on Debian by default, so this helper is for
// private anonymous buffers only.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace summon::memory {

// Buffers of at least this size get huge pages; smaller ones are plain
// anonymous mappings (a huge page would mostly be waste).
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Private anonymous memory of `size()` bytes, zero on first read, 2 MiB
// aligned when at least kHugePageBytes, with MADV_HUGEPAGE asked for.
// Move-only; unmapped when destroyed.
class FreshMemory {
 public:
  FreshMemory() = default;
  FreshMemory(FreshMemory&& other) noexcept;
  FreshMemory& operator=(FreshMemory&& other) noexcept;
  FreshMemory(const FreshMemory&) = delete;
  FreshMemory& operator=(const FreshMemory&) = delete;
  ~FreshMemory();

  // RESOURCE_EXHAUSTED when the system has no memory for it; 0 bytes is an
  // empty buffer.
  static absl::StatusOr<FreshMemory> Map(int64_t bytes);

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Whether the kernel accepted MADV_HUGEPAGE for it.
  bool huge_pages() const { return huge_pages_; }

 private:
  void Reset();

  void* mapping_ = nullptr;
  int64_t mapping_bytes_ = 0;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  bool huge_pages_ = false;
};

// Asks for huge pages on the 2 MiB aligned part of [data, data + bytes), a
// buffer someone else allocated (a std::string's reserve, malloc) and has
// not written yet: its later first writes fault 2 MiB at a time there.
// Returns whether the kernel accepted it; false for buffers smaller than
// two huge pages, which gain little. Harmless on memory already touched.
bool AdviseHugePages(void* data, int64_t bytes);

// The kernel's transparent huge page mode for anonymous memory: "always",
// "madvise" or "never" (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled), "unsupported" without it.
std::string TransparentHugePages();

}  // namespace summon::memory

#endif  // SUMMON_MEMORY_FRESH_MEMORY_H_
