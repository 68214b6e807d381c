#include "server/store/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::server::shm {
namespace {

// Trainers run as the daemon's user; nobody else may read the weights.
constexpr mode_t kSegmentMode = 0600;

absl::Status SystemError(int error, absl::string_view what,
                         absl::string_view name) {
  return absl::ErrnoToStatus(
      error, absl::StrCat(what, " shared-memory segment ", name));
}

}  // namespace

absl::Status Unlink(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return SystemError(errno, "cannot unlink", name);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Create(
    const std::string& name, int64_t size, int64_t reserve_bytes) {
  const int fd =
      shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, kSegmentMode);
  if (fd < 0) return SystemError(errno, "cannot create", name);
  auto fail = [&](int error, absl::string_view what) {
    close(fd);
    shm_unlink(name.c_str());
    return SystemError(error, what, name);
  };
  if (ftruncate(fd, size) != 0) return fail(errno, "cannot size");
  const int error = posix_fallocate(fd, 0, reserve_bytes);
  if (error != 0) return fail(error, "cannot reserve memory for");
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail(errno, "cannot map");
  return std::unique_ptr<Segment>(
      new Segment(name, fd, static_cast<uint8_t*>(data), size));
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Open(
    const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return SystemError(errno, "cannot open", name);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return SystemError(error, "cannot stat", name);
  }
  void* data = nullptr;
  if (info.st_size > 0) {
    data =
        mmap(nullptr, info.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      close(fd);
      return SystemError(error, "cannot map", name);
    }
  }
  return std::unique_ptr<Segment>(
      new Segment(name, fd, static_cast<uint8_t*>(data), info.st_size));
}

Segment::~Segment() {
  if (data_ != nullptr) munmap(data_, size_);
  close(fd_);
}

absl::Status Segment::Reserve(int64_t offset, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  const int error = posix_fallocate(fd_, offset, bytes);
  if (error != 0) return SystemError(error, "cannot reserve memory in", name_);
  return absl::OkStatus();
}

bool Segment::Unfinished() const {
  if (size_ < static_cast<int64_t>(sizeof(SegmentHeader))) return true;
  static constexpr char kZeros[sizeof(kMagic)] = {};
  return std::memcmp(header()->magic, kZeros, sizeof(kMagic)) == 0;
}

void Segment::PublishHeader() {
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(header()->magic, kMagic, sizeof(kMagic));
}

bool Segment::HasMagic() const {
  if (Unfinished()) return false;
  const bool magic = std::memcmp(header()->magic, kMagic, sizeof(kMagic)) == 0;
  std::atomic_thread_fence(std::memory_order_acquire);
  return magic;
}

}  // namespace summon::server::shm
