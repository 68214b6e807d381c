// The caller's slice buffer is checked whole before a byte is written: too
// small (naming the first entry that does not fit), not shared memory, not
// sealed against shrinking, sealed against writes; and its header says
// "complete" only after Complete(), also for a large answer unmapped
// after the call (UnmapLater).

#include "server/weight_sync/slice_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace summon::server {
namespace {

// A memfd of `size` bytes, all 0xAB, with `seals` added.
int Buffer(int64_t size, int seals = F_SEAL_SHRINK) {
  const int fd = memfd_create("slice-buffer-test", MFD_CLOEXEC |
                                                       MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, size), 0);
  const std::string bytes(size, '\xAB');
  EXPECT_EQ(pwrite(fd, bytes.data(), bytes.size(), 0),
            static_cast<ssize_t>(size));
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

std::string Contents(int fd, int64_t size) {
  std::string bytes(size, '\0');
  EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), 0),
            static_cast<ssize_t>(size));
  return bytes;
}

const std::vector<std::string> kNames = {"entry 0 ('a')", "entry 1 ('b')"};
const std::vector<int64_t> kOffsets = {0, 48};
const std::vector<int64_t> kBytes = {40, 24};  // Packed: 72 bytes.

TEST(SliceBufferTest, TooSmallNamesTheFirstEntryThatDoesNotFitAndWritesNothing) {
  const int fd = Buffer(64 + 60);
  const int kept = dup(fd);
  absl::StatusOr<SliceBuffer> buffer =
      SliceBuffer::Map(fd, 72, kNames, kOffsets, kBytes);
  ASSERT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer.status().message(),
            "entry 1 ('b'): ends at byte 136 of the slice buffer, which has "
            "124 bytes (the answer needs 136: a 64-byte header and the packed "
            "entries)");
  EXPECT_EQ(Contents(kept, 124), std::string(124, '\xAB'));
  close(kept);
}

TEST(SliceBufferTest, OnlySealedSharedMemoryIsWritten) {
  absl::StatusOr<SliceBuffer> unsealed =
      SliceBuffer::Map(Buffer(200, 0), 72, kNames, kOffsets, kBytes);
  EXPECT_NE(unsealed.status().message().find("sealed against shrinking"),
            std::string::npos)
      << unsealed.status();
  absl::StatusOr<SliceBuffer> readonly = SliceBuffer::Map(
      Buffer(200, F_SEAL_SHRINK | F_SEAL_WRITE), 72, kNames, kOffsets, kBytes);
  EXPECT_NE(readonly.status().message().find("sealed against writes"),
            std::string::npos)
      << readonly.status();
  std::FILE* file = std::tmpfile();  // On disk, not shared memory.
  ASSERT_NE(file, nullptr);
  absl::StatusOr<SliceBuffer> disk =
      SliceBuffer::Map(dup(fileno(file)), 0, {}, {}, {});
  std::fclose(file);
  EXPECT_NE(disk.status().message().find("not shared memory"),
            std::string::npos)
      << disk.status();
}

TEST(SliceBufferTest, TheHeaderSaysCompleteOnlyAfterComplete) {
  const int fd = Buffer(64 + 72);
  const int kept = dup(fd);
  absl::StatusOr<SliceBuffer> buffer =
      SliceBuffer::Map(fd, 72, kNames, kOffsets, kBytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  buffer->Begin(7, 2, "callcallXYZ");
  std::memset(buffer->data(), 1, 72);
  std::string header = Contents(kept, 64);
  EXPECT_EQ(header.substr(0, 8), "SUMSLICE");
  int64_t fields[5];
  std::memcpy(fields, header.data() + 8, sizeof(fields));
  EXPECT_EQ(fields[0], 0);  // Being written.
  EXPECT_EQ(fields[1], 7);
  EXPECT_EQ(fields[2], 72);
  EXPECT_EQ(fields[3], 2);
  EXPECT_EQ(header.substr(40, 8), "callcall");
  buffer->Complete();
  header = Contents(kept, 64);
  std::memcpy(fields, header.data() + 8, sizeof(fields));
  EXPECT_EQ(fields[0], 1);
  EXPECT_EQ(Contents(kept, 64 + 72).substr(64), std::string(72, '\1'));
  close(kept);
}

TEST(SliceBufferTest, ALargeAnswerIsWrittenWholeThenUnmappedOnAThreadOfItsOwn) {
  // Populated by several threads (24 MiB and a bit: not a multiple of
  // their parts, nor of a page).
  const int64_t total = (int64_t{24} << 20) + 40;
  const int fd = Buffer(64 + total);
  const int kept = dup(fd);
  absl::StatusOr<SliceBuffer> buffer =
      SliceBuffer::Map(fd, total, {"entry 0 ('big')"}, {0}, {total});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  buffer->Begin(3, 1, "bigcall!");
  std::string expected(total, '\0');
  for (int64_t at = 0; at < total; ++at) {
    expected[at] = static_cast<char>(at % 251);
  }
  std::memcpy(buffer->data(), expected.data(), total);
  buffer->Complete();
  SliceBuffer::UnmapLater(*std::move(buffer));
  const std::string contents = Contents(kept, 64 + total);
  int64_t state = 0;
  std::memcpy(&state, contents.data() + 8, 8);
  EXPECT_EQ(state, 1);
  EXPECT_TRUE(contents.substr(64) == expected);
  close(kept);
}

}  // namespace
}  // namespace summon::server
