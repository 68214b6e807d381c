#include "server/weight_sync/slice_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memory/parallel_copy.h"
#include "server/weight_sync/slice_destination.h"

namespace summon::server {
namespace {

constexpr char kMagic[8] = {'S', 'U', 'M', 'S', 'L', 'I', 'C', 'E'};
constexpr int64_t kStateAt = 8;

absl::Status Refuse(int fd, std::string message) {
  close(fd);
  return absl::InvalidArgumentError(std::move(message));
}

// Faults in the mapping's pages before the first write, as MAP_POPULATE
// does (read faults: shared memory maps its pages writable, 16 at a time),
// but split across the cores: one thread took ~70 ms of a 2 GB answer's
// ~650 ms on this project's machine (bench/RESULTS.md, "Weight sync's local
// pull"). Where MADV_POPULATE_READ is missing (EINVAL: Linux < 5.14), a
// read of each page faults it in the same way; any other failure leaves the
// pages to fault on the writes, as they would without populating.
void Populate(uint8_t* base, int64_t bytes) {
  constexpr int64_t kPart = int64_t{2} << 20;  // Page-table friendly.
  const int64_t page = sysconf(_SC_PAGESIZE);
  auto populate = [base, page](int64_t begin, int64_t end) {
#ifdef MADV_POPULATE_READ
    if (madvise(base + begin, end - begin, MADV_POPULATE_READ) == 0 ||
        errno != EINVAL) {
      return;
    }
#endif
    for (int64_t at = begin; at < end; at += page) {
      static_cast<void>(*static_cast<volatile uint8_t*>(base + at));
    }
  };
  const int threads =
      bytes < memory::kParallelCopyMinBytes ? 1 : memory::ParallelCopyThreads();
  const int64_t part =
      ((bytes + threads - 1) / threads + kPart - 1) / kPart * kPart;
  std::vector<std::thread> helpers;
  for (int64_t begin = part; begin < bytes; begin += part) {
    helpers.emplace_back(populate, begin, std::min(bytes, begin + part));
  }
  populate(0, std::min(bytes, part));
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace

absl::StatusOr<SliceBufferIdentity> SliceBuffer::Check(
    int fd, int64_t total_bytes, const std::vector<std::string>& names,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes) {
  // Seals exist only on shared memory (EINVAL for any other file): the
  // daemon writes into nothing else a caller could name.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Refuse(fd, "the slice buffer is not shared memory (a memfd or a "
                      "/dev/shm file)");
  }
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return Refuse(fd, "the slice buffer is sealed against writes");
  }
  // Unsealed, the caller could shrink it while the daemon writes, and the
  // daemon would die of SIGBUS.
  if ((seals & F_SEAL_SHRINK) == 0) {
    return Refuse(fd, "the slice buffer must be sealed against shrinking "
                      "(fcntl F_ADD_SEALS F_SEAL_SHRINK)");
  }
  struct stat info{};
  if (fstat(fd, &info) != 0) {
    return Refuse(fd, absl::StrCat("fstat of the slice buffer: ",
                                   std::strerror(errno)));
  }
  if (absl::Status fits =
          CheckSlicesFit("the slice buffer", kSliceBufferHeaderBytes,
                         info.st_size, total_bytes, names, offsets, bytes);
      !fits.ok()) {
    close(fd);
    return fits;
  }
  return SliceBufferIdentity{info.st_dev, info.st_ino, info.st_size};
}

absl::StatusOr<std::shared_ptr<SliceMapping>> SliceBuffer::MapChecked(
    int fd, int64_t size) {
  void* base = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  close(fd);  // The mapping keeps the memory.
  if (base == MAP_FAILED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mapping the slice buffer read-write: ", std::strerror(errno)));
  }
  Populate(static_cast<uint8_t*>(base), size);
  return std::make_shared<SliceMapping>(static_cast<uint8_t*>(base), size);
}

absl::StatusOr<SliceBuffer> SliceBuffer::Map(
    int fd, int64_t total_bytes, const std::vector<std::string>& names,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes) {
  if (absl::StatusOr<SliceBufferIdentity> checked =
          Check(fd, total_bytes, names, offsets, bytes);
      !checked.ok()) {
    return checked.status();
  }
  absl::StatusOr<std::shared_ptr<SliceMapping>> mapping =
      MapChecked(fd, kSliceBufferHeaderBytes + total_bytes);
  if (!mapping.ok()) return mapping.status();
  return SliceBuffer(*std::move(mapping), total_bytes);
}

SliceMapping::~SliceMapping() { munmap(base_, static_cast<size_t>(size_)); }

SliceBuffer::SliceBuffer(SliceBuffer&& other) noexcept
    : mapping_(std::move(other.mapping_)),
      base_(other.base_),
      size_(other.size_) {
  other.base_ = nullptr;
  other.size_ = 0;
}

SliceBuffer::~SliceBuffer() = default;

void SliceBuffer::Begin(int64_t version, int64_t entries,
                        const std::string& call) {
  // State first: a header left "complete" by an earlier read of the same
  // buffer stops vouching before anything else changes.
  reinterpret_cast<std::atomic<uint64_t>*>(base_ + kStateAt)
      ->store(0, std::memory_order_release);
  uint8_t header[kSliceBufferHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof(kMagic));
  const int64_t total = size_ - kSliceBufferHeaderBytes;
  std::memcpy(header + 16, &version, 8);
  std::memcpy(header + 24, &total, 8);
  std::memcpy(header + 32, &entries, 8);
  std::memcpy(header + 40, call.data(), std::min<size_t>(8, call.size()));
  std::memcpy(base_, header, kStateAt);
  std::memcpy(base_ + 16, header + 16, kSliceBufferHeaderBytes - 16);
}

void SliceBuffer::Complete() {
  reinterpret_cast<std::atomic<uint64_t>*>(base_ + kStateAt)
      ->store(1, std::memory_order_release);
}

void SliceBuffer::UnmapLater(SliceBuffer buffer) {
  std::thread([done = std::move(buffer)] {}).detach();
}

}  // namespace summon::server
