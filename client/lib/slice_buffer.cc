#include "client/lib/slice_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/lib/local_map.h"
#include "memory/fd_passing.h"

namespace summon::client {
namespace {

constexpr char kMagic[8] = {'S', 'U', 'M', 'S', 'L', 'I', 'C', 'E'};
constexpr int64_t kStateAt = 8;

}  // namespace

absl::StatusOr<SliceBuffer> SliceBuffer::Create(int64_t capacity) {
  if (capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity ", capacity, " is negative"));
  }
  const int fd = memfd_create("summon-slices", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  const int64_t size = kSliceBufferHeaderBytes + capacity;
  // Sealed against shrinking: the daemon refuses a buffer it could be made
  // to fault on (SIGBUS) while it writes.
  void* base = MAP_FAILED;
  if (ftruncate(fd, size) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0) {
    base = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                MAP_SHARED, fd, 0);
  }
  if (base == MAP_FAILED) {
    absl::Status error = absl::InternalError(absl::StrCat(
        "making a ", size, "-byte slice buffer: ", std::strerror(errno)));
    close(fd);
    return error;
  }
  return SliceBuffer(fd, static_cast<uint8_t*>(base), size);
}

SliceBuffer::SliceBuffer(SliceBuffer&& other) noexcept
    : fd_(other.fd_), base_(other.base_), size_(other.size_) {
  other.fd_ = -1;
  other.base_ = nullptr;
  other.size_ = 0;
}

SliceBuffer& SliceBuffer::operator=(SliceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    base_ = other.base_;
    size_ = other.size_;
    other.fd_ = -1;
    other.base_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

SliceBuffer::~SliceBuffer() { Release(); }

void SliceBuffer::Release() {
  if (base_ != nullptr) munmap(base_, static_cast<size_t>(size_));
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

bool SliceBuffer::complete() const {
  return reinterpret_cast<const std::atomic<uint64_t>*>(base_ + kStateAt)
             ->load(std::memory_order_acquire) == 1;
}

int64_t SliceBuffer::total_bytes() const {
  int64_t total = 0;
  std::memcpy(&total, base_ + 24, sizeof(total));
  return total;
}

absl::string_view SliceBuffer::call() const {
  return absl::string_view(reinterpret_cast<const char*>(base_) + 40, 8);
}

absl::string_view SliceBuffer::magic() const {
  return absl::string_view(reinterpret_cast<const char*>(base_), 8);
}

absl::Status SliceBuffer::HandOver(absl::string_view socket,
                                   absl::string_view token) const {
  absl::StatusOr<int> connected = ConnectToBroker(socket);
  if (!connected.ok()) return connected.status();
  const int connection = *connected;
  if (memory::SendWithDescriptor(connection, token, fd_) !=
      static_cast<ssize_t>(token.size())) {
    absl::Status error = absl::UnavailableError(
        absl::StrCat("handing the slice buffer over: ", std::strerror(errno)));
    close(connection);
    return error;
  }
  char reply[512];
  const ssize_t n = recv(connection, reply, sizeof(reply), 0);
  close(connection);
  return BrokerAnswer(n, reply, "the slice buffer");
}

void SliceBuffer::Begin(int64_t version, int64_t total_bytes, int64_t entries) {
  // State first, as the daemon does: a header left complete stops vouching
  // before anything else changes.
  reinterpret_cast<std::atomic<uint64_t>*>(base_ + kStateAt)
      ->store(0, std::memory_order_release);
  std::memcpy(base_, kMagic, sizeof(kMagic));
  std::memcpy(base_ + 16, &version, 8);
  std::memcpy(base_ + 24, &total_bytes, 8);
  std::memcpy(base_ + 32, &entries, 8);
  std::memset(base_ + 40, 0, kSliceBufferHeaderBytes - 40);
}

void SliceBuffer::Complete() {
  reinterpret_cast<std::atomic<uint64_t>*>(base_ + kStateAt)
      ->store(1, std::memory_order_release);
}

}  // namespace summon::client
