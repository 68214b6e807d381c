// ShardMemory::AccumulateWatch's default: host memory in place, and the
// fallback for device memory without watch kernels (the fake device here;
// CUDA memory overrides it, server/gpu/device_watch_test.cc): copied to the
// host in 8 MiB pieces, every element counted once across the pieces.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/seeded_init.h"
#include "core/watch_stats.h"
#include "gtest/gtest.h"
#include "server/store/shard_memory.h"
#include "server/testing/fake_device_memory.h"

namespace summon::server {
namespace {

// 8 MiB of float32 and 1000 more: two pieces, the second short.
constexpr int64_t kNumel = (int64_t{2} << 20) + 1000;

void ExpectSame(const core::WatchPartial& got, const core::WatchPartial& want) {
  EXPECT_EQ(got.numel, want.numel);
  EXPECT_EQ(got.finite, want.finite);
  EXPECT_EQ(got.nan_count, want.nan_count);
  EXPECT_EQ(got.inf_count, want.inf_count);
  EXPECT_EQ(got.min, want.min);
  EXPECT_EQ(got.max, want.max);
  EXPECT_EQ(got.abs_max, want.abs_max);
  EXPECT_EQ(got.histogram, want.histogram);
  EXPECT_EQ(got.below_range, want.below_range);
  EXPECT_EQ(got.above_range, want.above_range);
  // Pieces add their sums separately: the same doubles in another
  // association, each of the n additions off by at most 2^-53 of the
  // running sum, itself at most n * 0.5 here (seeded values in [-0.5, 0.5]).
  const double n = static_cast<double>(want.numel);
  const double bound = n * 0x1p-52 * (n * 0.5);
  EXPECT_NEAR(got.sum, want.sum, bound);
  EXPECT_NEAR(got.sum_of_squares, want.sum_of_squares, bound);
}

class ShardMemoryWatchTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(core::FillSeeded("watch.w", 7, core::DType::kFloat32, 0, kNumel,
                                 values_.data())
                    .ok());
    // Either side of the pieces' seam, and in the last element.
    const int64_t seam = int64_t{2} << 20;
    values_[seam - 1] = std::numeric_limits<float>::quiet_NaN();
    values_[seam] = std::numeric_limits<float>::infinity();
    values_[kNumel - 1] = -std::numeric_limits<float>::infinity();
  }

  // The CPU kernel over the same elements.
  core::WatchPartial Direct(int64_t first, int64_t count,
                            const std::optional<core::HistogramRange>& range,
                            int bins) const {
    core::WatchPartial partial =
        core::EmptyWatchPartial(bins, range.has_value());
    EXPECT_TRUE(core::AccumulateWatchPartial(core::DType::kFloat32,
                                             values_.data() + first, count,
                                             range, &partial)
                    .ok());
    return partial;
  }

  std::vector<float> values_ = std::vector<float>(kNumel);
};

TEST_F(ShardMemoryWatchTest, HostMemoryInPlaceAndDeviceMemoryInPieces) {
  const int64_t bytes = kNumel * 4;
  HostShardMemory host(reinterpret_cast<uint8_t*>(values_.data()), bytes);
  FakeDeviceMemoryProvider provider;
  absl::StatusOr<std::unique_ptr<ShardMemory>> device =
      provider.Allocate(0, bytes);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_TRUE((*device)->Write(0, values_.data(), bytes).ok());
  ASSERT_EQ((*device)->host(), nullptr);  // the copy path, as on a GPU
  for (const ShardMemory* memory :
       {static_cast<const ShardMemory*>(&host),
        static_cast<const ShardMemory*>(device->get())}) {
    SCOPED_TRACE(memory == &host ? "host" : "fake device");
    for (const std::optional<core::HistogramRange>& range :
         {std::optional<core::HistogramRange>(),
          std::optional<core::HistogramRange>({-0.25, 0.125})}) {
      // The whole shard, and a range at an odd element offset.
      for (const auto& [first, count] :
           {std::pair<int64_t, int64_t>{0, kNumel},
            std::pair<int64_t, int64_t>{3, kNumel - 10}}) {
        core::WatchPartial got = core::EmptyWatchPartial(16, range.has_value());
        const absl::Status added = memory->AccumulateWatch(
            first * 4, core::DType::kFloat32, count, range, &got);
        ASSERT_TRUE(added.ok()) << added;
        ExpectSame(got, Direct(first, count, range, 16));
      }
    }
  }
  const int64_t copies = provider.copies();
  core::WatchPartial partial = core::EmptyWatchPartial(0, false);
  EXPECT_EQ((*device)
                ->AccumulateWatch(4, core::DType::kFloat32, kNumel,
                                  std::nullopt, &partial)
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(partial.numel, 0);
  EXPECT_EQ(provider.copies(), copies);  // refused before any copy
}

}  // namespace
}  // namespace summon::server
