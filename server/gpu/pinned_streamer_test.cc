// Streaming device bytes through pinned chunks, both ways, with a size that
// is no whole number of chunks. Skips, printing why, without a GPU.
#include "server/gpu/pinned_streamer.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/seeded_init.h"
#include "gtest/gtest.h"
#include "server/gpu/device_buffer.h"
#include "server/gpu/device_stats.h"

namespace summon::server::gpu {
namespace {

TEST(PinnedStreamerTest, WithoutADeviceCreationSaysWhy) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_EQ(PinnedStreamer::Create(0, 1 << 20).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(PinnedStreamer::Create(0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PinnedStreamerOnGpuTest, ReadsAndWritesEveryByteInOrder) {
  const absl::Status available = CudaDeviceAvailable();
  if (!available.ok()) {
    GTEST_SKIP() << "needs a CUDA device: " << available.message();
  }
  const int64_t numel = 10 * (1 << 18) + 3;  // 10 MiB + 12 bytes of float32
  const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
  std::vector<float> seeded(static_cast<size_t>(numel));
  ASSERT_TRUE(
      core::FillSeeded("w", 11, core::DType::kFloat32, 0, numel, seeded.data())
          .ok());
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(0, bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  absl::StatusOr<std::unique_ptr<PinnedStreamer>> streamer =
      PinnedStreamer::Create(0, 1 << 20);
  ASSERT_TRUE(streamer.ok()) << streamer.status();

  // Host -> device through the chunks, then read back plainly.
  int64_t written = 0;
  ASSERT_TRUE((*streamer)
                  ->Write((*buffer)->data(), bytes,
                          [&](char* chunk, int64_t length) {
                            std::memcpy(
                                chunk,
                                reinterpret_cast<const char*>(seeded.data()) +
                                    written,
                                static_cast<size_t>(length));
                            written += length;
                            return absl::OkStatus();
                          })
                  .ok());
  EXPECT_EQ(written, bytes);
  std::vector<float> plain(static_cast<size_t>(numel));
  ASSERT_TRUE((*buffer)->CopyToHost(0, plain.data(), bytes).ok());
  EXPECT_EQ(plain, seeded);

  // Device -> host through the chunks.
  std::string received;
  int chunks = 0;
  ASSERT_TRUE((*streamer)
                  ->Read((*buffer)->data(), bytes,
                         [&](const char* chunk, int64_t length) {
                           received.append(chunk, static_cast<size_t>(length));
                           ++chunks;
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(chunks, 11);
  ASSERT_EQ(received.size(), static_cast<size_t>(bytes));
  EXPECT_EQ(std::memcmp(received.data(), seeded.data(), received.size()), 0);

  // A sink that fails stops the transfer with its error.
  EXPECT_EQ((*streamer)
                ->Read((*buffer)->data(), bytes,
                       [](const char*, int64_t) {
                         return absl::CancelledError("reader went away");
                       })
                .message(),
            "reader went away");
}

}  // namespace
}  // namespace summon::server::gpu
