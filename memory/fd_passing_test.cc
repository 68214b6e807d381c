#include "memory/fd_passing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace summon::memory {
namespace {

class FdPassingTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets_), 0);
  }
  void TearDown() override {
    close(sockets_[0]);
    close(sockets_[1]);
  }
  // A memory file holding `text`.
  static int MemoryFile(const std::string& text) {
    const int fd = memfd_create("fd_passing_test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    return fd;
  }
  static int OpenDescriptors() {
    int count = 0;
    for (const auto& entry :
         std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)entry;
      ++count;
    }
    return count;
  }
  static std::string Contents(int fd) {
    char bytes[64] = {};
    const ssize_t n = pread(fd, bytes, sizeof(bytes), 0);
    return std::string(bytes, n > 0 ? static_cast<size_t>(n) : 0);
  }

  int sockets_[2] = {-1, -1};
};

TEST_F(FdPassingTest, TheBytesAndTheDescriptorArriveTogether) {
  const int sent = MemoryFile("segment 7");
  ASSERT_EQ(SendWithDescriptor(sockets_[0], "token-1", sent), 7);
  char buffer[16] = {};
  int received = -1;
  ASSERT_EQ(
      ReceiveWithDescriptor(sockets_[1], buffer, sizeof(buffer), &received), 7);
  EXPECT_EQ(std::string(buffer, 7), "token-1");
  ASSERT_GE(received, 0);
  EXPECT_NE(received, sent);
  // The same open file: what one writes the other reads.
  EXPECT_EQ(Contents(received), "segment 7");
  ASSERT_EQ(pwrite(sent, "S", 1, 0), 1);
  EXPECT_EQ(Contents(received), "Segment 7");
  EXPECT_EQ(fcntl(received, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  close(sent);
  close(received);
}

TEST_F(FdPassingTest, NoDescriptorSentNoneReceived) {
  ASSERT_EQ(SendWithDescriptor(sockets_[0], "Kok", -1), 3);
  char buffer[16] = {};
  int received = -1;
  ASSERT_EQ(
      ReceiveWithDescriptor(sockets_[1], buffer, sizeof(buffer), &received), 3);
  EXPECT_EQ(std::string(buffer, 3), "Kok");
  EXPECT_EQ(received, -1);
}

TEST_F(FdPassingTest, ADescriptorBeyondTheFirstIsClosed) {
  const int first = MemoryFile("first");
  const int second = MemoryFile("second");
  ASSERT_EQ(SendWithDescriptor(sockets_[0], "a", first), 1);
  char buffer[1] = {};
  int received = -1;
  ASSERT_EQ(ReceiveWithDescriptor(sockets_[1], buffer, 1, &received), 1);
  ASSERT_EQ(SendWithDescriptor(sockets_[0], "b", second), 1);
  const int open_before = OpenDescriptors();
  int kept = received;
  ASSERT_EQ(ReceiveWithDescriptor(sockets_[1], buffer, 1, &kept), 1);
  EXPECT_EQ(kept, received);
  EXPECT_EQ(Contents(kept), "first");
  // The second arrived and was closed again: no descriptor more is open.
  EXPECT_EQ(OpenDescriptors(), open_before);
  close(first);
  close(second);
  close(received);
}

TEST_F(FdPassingTest, APeerGoneIsAnErrorNotASignal) {
  close(sockets_[1]);
  sockets_[1] = socket(AF_UNIX, SOCK_STREAM, 0);
  errno = 0;
  EXPECT_EQ(SendWithDescriptor(sockets_[0], "x", -1), -1);
  EXPECT_EQ(errno, EPIPE);
}

}  // namespace
}  // namespace summon::memory
