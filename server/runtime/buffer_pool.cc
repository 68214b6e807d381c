#include "server/runtime/buffer_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::server {
namespace {

int64_t PageBytes() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

void Unmap(uint8_t* data, int64_t capacity, int fd) {
  munmap(data, static_cast<size_t>(capacity));
  close(fd);
}

absl::Status MapError(const char* what, int64_t bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot ", what, " ", bytes,
                   " bytes for a session copy: ", std::strerror(errno)));
}

// A sealed memfd of `capacity` bytes, mapped read-write and pre-faulted in
// one go (cheaper than a fault per page on first touch).
absl::Status MapSealed(int64_t capacity, uint8_t** data, int* fd) {
  *fd = memfd_create("summon-session-copy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0) return MapError("create", capacity);
  void* mapped = MAP_FAILED;
  if (ftruncate(*fd, capacity) == 0) {
    mapped = mmap(nullptr, static_cast<size_t>(capacity),
                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, *fd, 0);
  }
  if (mapped == MAP_FAILED) {
    absl::Status error = MapError("map", capacity);
    close(*fd);
    return error;
  }
  // After the mapping: F_SEAL_FUTURE_WRITE leaves this writable mapping
  // working and refuses every later writable one.
  if (fcntl(*fd, F_ADD_SEALS,
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) !=
      0) {
    absl::Status error = absl::InternalError(absl::StrCat(
        "cannot seal a session copy's memfd: ", std::strerror(errno)));
    Unmap(static_cast<uint8_t*>(mapped), capacity, *fd);
    return error;
  }
  *data = static_cast<uint8_t*>(mapped);
  return absl::OkStatus();
}

}  // namespace

PooledBuffer::PooledBuffer(PooledBuffer&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      shared_(std::exchange(other.shared_, false)) {}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    fd_ = std::exchange(other.fd_, -1);
    shared_ = std::exchange(other.shared_, false);
  }
  return *this;
}

PooledBuffer::~PooledBuffer() { Reset(); }

void PooledBuffer::Reset() {
  if (data_ != nullptr) {
    if (shared_) {
      Unmap(data_, capacity_, fd_);
    } else {
      pool_->Release(data_, capacity_, fd_);
    }
  }
  pool_.reset();
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
  fd_ = -1;
  shared_ = false;
}

absl::StatusOr<int> PooledBuffer::ShareReadOnly() {
  if (data_ == nullptr) {
    return absl::FailedPreconditionError("an empty session copy");
  }
  // A new open file description, read-only: the memfd's own is read-write.
  const int fd =
      open(absl::StrCat("/proc/self/fd/", fd_).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(
        "cannot reopen a session copy read-only: ", std::strerror(errno)));
  }
  if (!shared_) {
    // A pooled mapping may be larger than asked, and its tail may hold an
    // earlier session's bytes: the client may map the whole descriptor.
    std::memset(data_ + size_, 0, static_cast<size_t>(capacity_ - size_));
    shared_ = true;
  }
  return fd;
}

std::shared_ptr<BufferPool> BufferPool::Create(const Options& options) {
  return std::shared_ptr<BufferPool>(new BufferPool(options));
}

BufferPool::BufferPool(const Options& options)
    : options_(options), trimmer_([this] { TrimLoop(); }) {}

BufferPool::~BufferPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  trimmer_.join();
  for (const Idle& idle : idle_) Unmap(idle.data, idle.capacity, idle.fd);
}

int64_t BufferPool::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

int64_t BufferPool::reuses() const {
  absl::MutexLock lock(&mu_);
  return reuses_;
}

int64_t BufferPool::fresh() const {
  absl::MutexLock lock(&mu_);
  return fresh_;
}

absl::StatusOr<PooledBuffer> BufferPool::Acquire(int64_t bytes) {
  PooledBuffer buffer;
  if (bytes <= 0) return buffer;
  const int64_t page = PageBytes();
  const int64_t capacity = (bytes + page - 1) / page * page;
  std::deque<Idle> evicted;
  {
    absl::MutexLock lock(&mu_);
    // The smallest idle mapping that fits without wasting more than half.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= capacity && it->capacity <= 2 * capacity &&
          (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      buffer.data_ = best->data;
      buffer.capacity_ = best->capacity;
      buffer.fd_ = best->fd;
      idle_bytes_ -= best->capacity;
      idle_.erase(best);
      ++reuses_;
    } else {
      ++fresh_;
      // A new mapping: nothing idle stays beside it, so idle memory never
      // adds to the peak that a new copy makes (the planned copies only).
      evicted = TakeOldest(0);
    }
  }
  for (const Idle& idle : evicted) Unmap(idle.data, idle.capacity, idle.fd);
  if (buffer.data_ == nullptr) {
    if (absl::Status mapped = MapSealed(capacity, &buffer.data_, &buffer.fd_);
        !mapped.ok()) {
      return mapped;
    }
    buffer.capacity_ = capacity;
  }
  buffer.size_ = bytes;
  buffer.pool_ = shared_from_this();
  return buffer;
}

void BufferPool::Release(uint8_t* data, int64_t capacity, int fd) {
  std::deque<Idle> evicted;
  {
    absl::MutexLock lock(&mu_);
    idle_.push_back({data, capacity, fd, absl::Now()});
    idle_bytes_ += capacity;
    ++releases_;
    evicted = TakeOldest(options_.max_retained_bytes);
  }
  for (const Idle& idle : evicted) Unmap(idle.data, idle.capacity, idle.fd);
}

std::deque<BufferPool::Idle> BufferPool::TakeOldest(int64_t keep) {
  std::deque<Idle> taken;
  while (!idle_.empty() && idle_bytes_ > std::max<int64_t>(keep, 0)) {
    idle_bytes_ -= idle_.front().capacity;
    taken.push_back(idle_.front());
    idle_.pop_front();
  }
  return taken;
}

void BufferPool::TrimLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // Sleeps until the oldest idle mapping expires, a release (which may
    // start the clock on an empty pool) or the pool's end.
    const uint64_t releases = releases_;
    auto woken = [this, releases]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || releases_ != releases;
    };
    const absl::Duration wait =
        idle_.empty() ? absl::InfiniteDuration()
                      : idle_.front().since + options_.max_idle - absl::Now();
    if (wait > absl::ZeroDuration()) {
      mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
      continue;
    }
    std::deque<Idle> expired;
    const absl::Time now = absl::Now();
    while (!idle_.empty() && now - idle_.front().since >= options_.max_idle) {
      idle_bytes_ -= idle_.front().capacity;
      expired.push_back(idle_.front());
      idle_.pop_front();
    }
    // munmap of a large mapping takes a while; nobody waits on the pool's
    // lock for it.
    mu_.Unlock();
    for (const Idle& idle : expired) Unmap(idle.data, idle.capacity, idle.fd);
    mu_.Lock();
  }
}

}  // namespace summon::server
