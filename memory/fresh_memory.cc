#include "memory/fresh_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::memory {

FreshMemory::FreshMemory(FreshMemory&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      huge_pages_(std::exchange(other.huge_pages_, false)) {}

FreshMemory& FreshMemory::operator=(FreshMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    huge_pages_ = std::exchange(other.huge_pages_, false);
  }
  return *this;
}

FreshMemory::~FreshMemory() { Reset(); }

void FreshMemory::Reset() {
  if (mapping_ != nullptr)
    munmap(mapping_, static_cast<size_t>(mapping_bytes_));
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  data_ = nullptr;
  size_ = 0;
  huge_pages_ = false;
}

absl::StatusOr<FreshMemory> FreshMemory::Map(int64_t bytes) {
  FreshMemory memory;
  if (bytes <= 0) return memory;
  const bool huge = bytes >= kHugePageBytes;
  // A huge page of slack, so the data can start 2 MiB aligned: only aligned
  // 2 MiB ranges can be huge pages.
  const int64_t mapped = huge ? bytes + kHugePageBytes : bytes;
  void* mapping =
      mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", bytes, " bytes of memory: ", std::strerror(errno)));
  }
  memory.mapping_ = mapping;
  memory.mapping_bytes_ = mapped;
  const uintptr_t base = reinterpret_cast<uintptr_t>(mapping);
  memory.data_ = reinterpret_cast<uint8_t*>(
      huge ? (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes
           : base);
  memory.size_ = bytes;
  // EINVAL without THP in the kernel; the memory is still good.
  memory.huge_pages_ = huge && madvise(memory.data_, static_cast<size_t>(bytes),
                                       MADV_HUGEPAGE) == 0;
  return memory;
}

bool AdviseHugePages(void* data, int64_t bytes) {
  if (data == nullptr || bytes < 2 * kHugePageBytes) return false;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first =
      (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t last =
      (begin + static_cast<uintptr_t>(bytes)) / kHugePageBytes * kHugePageBytes;
  if (last <= first) return false;
  return madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) ==
         0;
}

std::string TransparentHugePages() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(file, line)) return "unsupported";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) {
    return "unsupported";
  }
  return line.substr(open + 1, close - open - 1);
}

}  // namespace summon::memory
