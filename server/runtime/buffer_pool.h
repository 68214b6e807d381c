#ifndef SUMMON_SERVER_RUNTIME_BUFFER_POOL_H_
#define SUMMON_SERVER_RUNTIME_BUFFER_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace summon::server {

class BufferPool;

// Memory for a session copy: page-aligned memory whose contents are
// undefined until written. A gather overwrites every byte of its tensors,
// so zero-filling first would only add a pass over the data. Destroying it
// gives the memory back to its pool, unless it was shared.
//
// The memory is a memfd mapped MAP_SHARED, so that a client on this host can
// be handed a read-only descriptor of it (MapSession). The memfd is sealed
// against shrinking, growing and any future write (F_SEAL_FUTURE_WRITE): the
// daemon writes through the mapping it made before sealing; a descriptor
// given away can neither map it writable, write(2) it nor truncate it.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(PooledBuffer&& other) noexcept;
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

  // A new read-only descriptor of the memory (O_RDONLY, close-on-exec), to
  // hand to a client; the caller owns it. Once shared, the memory is never
  // pooled again (unmapped and closed when the buffer is destroyed): a
  // client still holding a mapping then sees only this buffer's data, never
  // a later session's. The bytes past size() are zeroed on the first share
  // (a reused mapping's tail may hold an earlier session's data).
  absl::StatusOr<int> ShareReadOnly();

 private:
  friend class BufferPool;
  void Reset();

  std::shared_ptr<BufferPool> pool_;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  int64_t capacity_ = 0;  // Of the mapping, a whole number of pages.
  int fd_ = -1;           // The memfd behind the mapping.
  bool shared_ = false;
};

// Keeps the memory of released session copies for a while, so the next
// gather of a similar size writes into pages that are already mapped instead
// of page-faulting (and having the kernel zero) every page of a fresh
// allocation; on this project's 2-vCPU machine that is most of a 256 MiB
// gather's time. Retained memory is bounded (max_retained_bytes, summond
// --copy-pool-bytes) and handed back to the system after max_idle without
// use (--copy-pool-idle), so a daemon at rest returns to its baseline RSS.
// The copies are memfd (shmem) pages, which transparent huge pages leave
// alone where shmem_enabled is `never` (Debian's default): a fresh copy is
// faulted 4 KiB at a time, so the retention is what makes an open after a
// pause as fast as a back-to-back one. Retained memory never adds to the
// peak of the memory budget (R9): a fresh mapping is made only after every
// idle one was unmapped. Thread-safe; buffers keep their pool alive.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  struct Options {
    int64_t max_retained_bytes = int64_t{1} << 30;
    absl::Duration max_idle = absl::Minutes(10);
  };

  static std::shared_ptr<BufferPool> Create(const Options& options);
  static std::shared_ptr<BufferPool> Create() { return Create(Options()); }

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  // `bytes` of undefined contents: a retained mapping of at least that size
  // and at most twice it when there is one, else a fresh, pre-faulted one
  // after every idle mapping was unmapped.
  // RESOURCE_EXHAUSTED when the system has no memory for it.
  absl::StatusOr<PooledBuffer> Acquire(int64_t bytes);

  int64_t retained_bytes() const;
  // Acquires served from a retained mapping, and from a fresh one.
  int64_t reuses() const;
  int64_t fresh() const;
  const Options& options() const { return options_; }

 private:
  friend class PooledBuffer;
  struct Idle {
    uint8_t* data = nullptr;
    int64_t capacity = 0;
    int fd = -1;
    absl::Time since;
  };

  explicit BufferPool(const Options& options);
  void Release(uint8_t* data, int64_t capacity, int fd);
  // Unmaps idle mappings past max_idle until the pool is destroyed.
  void TrimLoop();
  // Moves the oldest idle mappings out until at most `keep` bytes remain.
  std::deque<Idle> TakeOldest(int64_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<Idle> idle_ ABSL_GUARDED_BY(mu_);  // Oldest first.
  int64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t releases_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reuses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fresh_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread trimmer_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_BUFFER_POOL_H_
