// A caller's buffer is mapped once and written through the same mapping by
// every later read; a new buffer, one that grew, and one left idle are
// mapped anew; the cache keeps at most max_mappings; refusals stay those of
// SliceBuffer::Map.

#include "server/weight_sync/slice_buffer_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

int Buffer(int64_t size, int seals = F_SEAL_SHRINK) {
  const int fd =
      memfd_create("slice-buffer-cache-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, size), 0);
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

std::string Contents(int fd, int64_t at, int64_t size) {
  std::string bytes(size, '\0');
  EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), at),
            static_cast<ssize_t>(size));
  return bytes;
}

// One read of `total` bytes, all `fill`, into the buffer `fd` names (a
// fresh descriptor each read, as the broker hands them over).
uint8_t* Write(SliceBufferCache& cache, int fd, int64_t total, char fill) {
  absl::StatusOr<SliceBuffer> buffer =
      cache.Map(dup(fd), total, {"entry 0 ('w')"}, {0}, {total});
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return nullptr;
  buffer->Begin(7, 1, "cachecall");
  std::memset(buffer->data(), fill, total);
  buffer->Complete();
  return buffer->data();
}

SliceBufferCache::Options Options(int max_mappings, absl::Duration idle) {
  SliceBufferCache::Options options;
  options.max_mappings = max_mappings;
  options.idle = idle;
  return options;
}

TEST(SliceBufferCacheTest, ABufferIsMappedOnceForEveryRead) {
  SliceBufferCache cache(Options(4, absl::Seconds(60)));
  const int fd = Buffer(64 + 4096);
  uint8_t* first = Write(cache, fd, 4096, '\1');
  uint8_t* second = Write(cache, fd, 1000, '\2');
  EXPECT_EQ(first, second);  // The same mapping.
  EXPECT_EQ(cache.mapped(), 1);
  EXPECT_EQ(cache.reused(), 1);
  EXPECT_EQ(Contents(fd, 64, 1000), std::string(1000, '\2'));
  EXPECT_EQ(Contents(fd, 64 + 1000, 3096), std::string(3096, '\1'));
  int64_t total = 0;
  std::memcpy(&total, Contents(fd, 24, 8).data(), 8);
  EXPECT_EQ(total, 1000);  // The header describes this answer.
  close(fd);
}

TEST(SliceBufferCacheTest, OtherGrownAndIdleBuffersAreMappedAnew) {
  SliceBufferCache cache(Options(2, absl::Milliseconds(200)));
  const int a = Buffer(64 + 4096, 0);  // Unsealed: it grows below.
  ASSERT_EQ(fcntl(a, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  const int b = Buffer(64 + 4096);
  const int c = Buffer(64 + 4096);
  Write(cache, a, 4096, '\1');
  Write(cache, b, 4096, '\2');
  EXPECT_EQ(cache.mapped(), 2);
  Write(cache, c, 4096, '\3');  // The oldest (a) is dropped.
  EXPECT_EQ(cache.mapped(), 2);
  Write(cache, a, 4096, '\4');
  EXPECT_EQ(cache.reused(), 0);
  // a grows past its mapping: a new one, the answer whole.
  ASSERT_EQ(ftruncate(a, 64 + 8192), 0);
  Write(cache, a, 8192, '\5');
  EXPECT_EQ(cache.reused(), 0);
  EXPECT_EQ(Contents(a, 64, 8192), std::string(8192, '\5'));
  Write(cache, a, 8192, '\6');
  EXPECT_EQ(cache.reused(), 1);
  // Idle past 200 ms: every mapping is dropped by the sweeper.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (cache.mapped() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(cache.mapped(), 0);
  Write(cache, a, 8192, '\7');
  EXPECT_EQ(cache.reused(), 1);
  EXPECT_EQ(Contents(a, 64, 8192), std::string(8192, '\7'));
  for (int fd : {a, b, c}) close(fd);
}

TEST(SliceBufferCacheTest, RefusalsAreSliceBuffersOwnAndMapNothing) {
  SliceBufferCache cache(SliceBufferCache::Options{});
  const int unsealed = Buffer(64 + 4096, 0);
  absl::StatusOr<SliceBuffer> refused =
      cache.Map(dup(unsealed), 4096, {"entry 0 ('w')"}, {0}, {4096});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "the slice buffer must be sealed against shrinking (fcntl "
            "F_ADD_SEALS F_SEAL_SHRINK)");
  const int small = Buffer(64 + 100);
  absl::StatusOr<SliceBuffer> too_small =
      cache.Map(dup(small), 4096, {"entry 0 ('w')"}, {0}, {4096});
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.mapped(), 0);
  // A buffer mapped once, then refused as too small for a larger answer.
  Write(cache, small, 100, '\1');
  absl::StatusOr<SliceBuffer> grown_answer =
      cache.Map(dup(small), 4096, {"entry 0 ('w')"}, {0}, {4096});
  EXPECT_FALSE(grown_answer.ok());
  EXPECT_EQ(Contents(small, 64, 100), std::string(100, '\1'));
  close(unsealed);
  close(small);
}

}  // namespace
}  // namespace summon::server
