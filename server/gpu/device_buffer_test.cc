// Device buffers and their CUDA IPC handles, shared with a second process
// (ipc_child) the way a trainer maps a device shard. The checks that need a
// GPU skip, printing why, where none is visible.
#include "server/gpu/device_buffer.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"
#include "server/gpu/device_stats.h"

extern char** environ;

namespace summon::server::gpu {
namespace {

TEST(DeviceBufferTest, WithoutADeviceAllocationSaysWhy) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a CUDA device is visible";
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(0, 1024);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(buffer.status().message().find("CUDA device 0"), std::string::npos)
      << buffer.status();
}

TEST(DeviceBufferTest, RefusesAHandleOfTheWrongSize) {
  EXPECT_EQ(IpcMappedBuffer::Open(0, "short").status().message(),
            "a CUDA IPC handle has 64 bytes, got 5");
}

class DeviceBufferOnGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    const absl::Status available = CudaDeviceAvailable();
    if (!available.ok()) {
      GTEST_SKIP() << "needs a CUDA device: " << available.message();
    }
  }
};

TEST_F(DeviceBufferOnGpuTest, StartsZeroedAndChecksItsRanges) {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(0, 4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::vector<uint8_t> host(4096, 0xff);
  ASSERT_TRUE((*buffer)->CopyToHost(0, host.data(), 4096).ok());
  EXPECT_EQ(host, std::vector<uint8_t>(4096, 0));
  EXPECT_EQ((*buffer)->CopyToHost(4000, host.data(), 97).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*buffer)->CopyFromHost(-1, host.data(), 1).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(DeviceBufferOnGpuTest, AnotherProcessComputesInPlaceThroughIpc) {
  const int64_t numel = (1 << 18) + 3;
  const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(0, bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::vector<float> seeded(static_cast<size_t>(numel));
  ASSERT_TRUE(
      core::FillSeeded("w", 7, core::DType::kFloat32, 0, numel, seeded.data())
          .ok());
  ASSERT_TRUE((*buffer)->CopyFromHost(0, seeded.data(), bytes).ok());
  absl::StatusOr<std::string> handle = (*buffer)->IpcHandle();
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_EQ(handle->size(), kIpcHandleBytes);

  std::string child =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/summon/server/gpu/ipc_child");
  std::string device = "0";
  std::string hex = absl::BytesToHexString(*handle);
  std::string count = absl::StrCat(numel);
  char* argv[] = {child.data(), device.data(), hex.data(), count.data(),
                  nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, child.c_str(), nullptr, nullptr, argv, environ),
            0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "ipc_child failed, status " << status;
  std::vector<float> after(static_cast<size_t>(numel));
  ASSERT_TRUE((*buffer)->CopyToHost(0, after.data(), bytes).ok());
  for (int64_t i = 0; i < numel; ++i) {
    ASSERT_EQ(after[i], 2 * seeded[i]) << "element " << i;
  }
}

}  // namespace
}  // namespace summon::server::gpu
