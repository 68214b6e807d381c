#include "server/runtime/buffer_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

PooledBuffer AcquireOrDie(BufferPool& pool, int64_t bytes) {
  absl::StatusOr<PooledBuffer> buffer = pool.Acquire(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return buffer.ok() ? *std::move(buffer) : PooledBuffer();
}

// Long enough that nothing expires during a test that does not wait for it.
BufferPool::Options KeepLong() {
  BufferPool::Options options;
  options.max_idle = absl::Hours(1);
  return options;
}

TEST(BufferPoolTest, GivesWritableMemoryOfTheAskedSize) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  PooledBuffer buffer = AcquireOrDie(*pool, 3 * kMiB + 5);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), 3 * kMiB + 5);
  std::memset(buffer.data(), 7, buffer.size());
  EXPECT_EQ(buffer.data()[buffer.size() - 1], 7);
}

TEST(BufferPoolTest, ZeroBytesIsAnEmptyBuffer) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  PooledBuffer buffer = AcquireOrDie(*pool, 0);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), 0);
}

TEST(BufferPoolTest, AReleasedMappingServesTheNextSimilarSize) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  uint8_t* first = nullptr;
  {
    PooledBuffer buffer = AcquireOrDie(*pool, 4 * kMiB);
    first = buffer.data();
  }
  EXPECT_EQ(pool->retained_bytes(), 4 * kMiB);
  PooledBuffer again = AcquireOrDie(*pool, 3 * kMiB);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.size(), 3 * kMiB);
  EXPECT_EQ(pool->retained_bytes(), 0);
}

TEST(BufferPoolTest, AMissUnmapsIdleMappingsInsteadOfKeepingThemBesideIt) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  uint8_t* big_data = nullptr;
  {
    PooledBuffer big = AcquireOrDie(*pool, 8 * kMiB);
    big_data = big.data();
  }
  // Much smaller: the 8 MiB mapping is not handed out, and not kept either.
  PooledBuffer small = AcquireOrDie(*pool, kMiB);
  EXPECT_NE(small.data(), big_data);
  EXPECT_EQ(pool->retained_bytes(), 0);
}

TEST(BufferPoolTest, RetainsAtMostItsBound) {
  BufferPool::Options options = KeepLong();
  options.max_retained_bytes = 6 * kMiB;
  std::shared_ptr<BufferPool> pool = BufferPool::Create(options);
  {
    PooledBuffer a = AcquireOrDie(*pool, 4 * kMiB);
    PooledBuffer b = AcquireOrDie(*pool, 4 * kMiB);
  }
  // The second release would have gone over the bound: the older one went.
  EXPECT_EQ(pool->retained_bytes(), 4 * kMiB);
}

TEST(BufferPoolTest, IdleMappingsGoBackToTheSystem) {
  BufferPool::Options options;
  options.max_idle = absl::Milliseconds(20);
  std::shared_ptr<BufferPool> pool = BufferPool::Create(options);
  { PooledBuffer buffer = AcquireOrDie(*pool, 2 * kMiB); }
  // Waits for the trimmer (no timing asserted: only that it happens).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (pool->retained_bytes() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(pool->retained_bytes(), 0);
}

TEST(BufferPoolTest, ABufferOutlivesThePoolsLastHandle) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  PooledBuffer buffer = AcquireOrDie(*pool, kMiB);
  pool.reset();
  std::memset(buffer.data(), 1, buffer.size());
  PooledBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.data()[0], 1);
}

// The same-node read path (MapSession): a client gets the copy's bytes
// through the descriptor, and no way to change them.
TEST(BufferPoolTest, ASharedDescriptorReadsTheBytesAndCannotWriteThem) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  PooledBuffer buffer = AcquireOrDie(*pool, 2 * kMiB);
  for (int64_t i = 0; i < buffer.size(); ++i) buffer.data()[i] = i % 251;
  absl::StatusOr<int> fd = buffer.ShareReadOnly();
  ASSERT_TRUE(fd.ok()) << fd.status();
  void* view = mmap(nullptr, 2 * kMiB, PROT_READ, MAP_SHARED, *fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  const auto* bytes = static_cast<const uint8_t*>(view);
  for (int64_t i = 0; i < 2 * kMiB; i += 4093) ASSERT_EQ(bytes[i], i % 251);
  // The daemon's own mapping still writes, and the client sees it.
  buffer.data()[5] = 99;
  EXPECT_EQ(bytes[5], 99);
  EXPECT_NE(mprotect(view, 2 * kMiB, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0),
            MAP_FAILED);
  EXPECT_NE(ftruncate(*fd, 0), 0);
  // Not even through a read-write reopen of the same memfd: it is sealed.
  const int rw = open(("/proc/self/fd/" + std::to_string(*fd)).c_str(),
                      O_RDWR | O_CLOEXEC);
  ASSERT_GE(rw, 0) << std::strerror(errno);
  EXPECT_EQ(mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  const uint8_t zero = 0;
  EXPECT_LT(pwrite(rw, &zero, 1, 0), 0);
  EXPECT_NE(ftruncate(rw, 0), 0);
  EXPECT_NE(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
            0);
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[5], 99);
  close(rw);
  close(*fd);
  munmap(view, 2 * kMiB);
}

// A shared copy's memory never serves another session: a client that kept
// its mapping would see that session's data.
TEST(BufferPoolTest, ASharedBufferIsNotPooledAgain) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(KeepLong());
  {
    PooledBuffer buffer = AcquireOrDie(*pool, 4 * kMiB);
    absl::StatusOr<int> fd = buffer.ShareReadOnly();
    ASSERT_TRUE(fd.ok()) << fd.status();
    close(*fd);
  }
  EXPECT_EQ(pool->retained_bytes(), 0);
}

}  // namespace
}  // namespace summon::server
