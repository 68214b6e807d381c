// The shared histogram bin formula (core/watch_bins.h): its edges, and that
// the CPU kernel's histogram is exactly the formula applied element by
// element (the CUDA kernel's test, server/gpu/device_watch_test.cc, holds
// the GPU to the same CPU kernel).
#include "core/watch_bins.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/seeded_init.h"
#include "core/watch_stats.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

TEST(WatchBinsTest, ScaleIsBinsOverTheWidth) {
  EXPECT_EQ(WatchBinScale(-1, 1, 4), 2.0);
  EXPECT_EQ(WatchBinScale(0, 0.5, 8), 16.0);
  // No width, or no bins: everything in range goes to bin 0.
  EXPECT_EQ(WatchBinScale(3, 3, 8), 0.0);
  EXPECT_EQ(WatchBinScale(0, 1, 0), 0.0);
  // An inverted range has no width either.
  EXPECT_EQ(WatchBinScale(1, 0, 4), 0.0);
}

TEST(WatchBinsTest, EdgesBelowInsideLastBinClosedAndAbove) {
  const double scale = WatchBinScale(-1, 1, 4);  // bins of width 0.5
  EXPECT_EQ(WatchHistogramSlot(-1.0000001, -1, 1, scale, 4), 0);
  EXPECT_EQ(WatchHistogramSlot(-1, -1, 1, scale, 4), 1);  // lower edge: bin 0
  EXPECT_EQ(WatchHistogramSlot(-0.5000001, -1, 1, scale, 4), 1);
  EXPECT_EQ(WatchHistogramSlot(-0.5, -1, 1, scale, 4), 2);
  EXPECT_EQ(WatchHistogramSlot(0, -1, 1, scale, 4), 3);
  EXPECT_EQ(WatchHistogramSlot(0.9999999, -1, 1, scale, 4), 4);
  EXPECT_EQ(WatchHistogramSlot(1, -1, 1, scale, 4), 4);  // last bin closed
  EXPECT_EQ(WatchHistogramSlot(1.0000001, -1, 1, scale, 4), 5);
  // Far outside: the clamps keep the conversion defined.
  EXPECT_EQ(WatchHistogramSlot(-1e300, -1, 1, scale, 4), 0);
  EXPECT_EQ(WatchHistogramSlot(1e300, -1, 1, scale, 4), 5);
}

TEST(WatchBinsTest, ZeroWidthRangePutsItsValueInBinZero) {
  const double scale = WatchBinScale(0.25, 0.25, 8);
  EXPECT_EQ(WatchHistogramSlot(0.25, 0.25, 0.25, scale, 8), 1);
  EXPECT_EQ(WatchHistogramSlot(0.2, 0.25, 0.25, scale, 8), 0);
  EXPECT_EQ(WatchHistogramSlot(0.3, 0.25, 0.25, scale, 8), 9);
}

// The CPU kernel's histogram, on both of its paths (the vectorised blocks,
// and the careful loop a block with a NaN takes), equals the formula
// applied element by element.
TEST(WatchBinsTest, CpuKernelBinsByTheSharedFormula) {
  constexpr int64_t kNumel = 3 * 4096 + 123;
  std::vector<float> values(kNumel);
  ASSERT_TRUE(
      FillSeeded("bins.w", 11, DType::kFloat32, 0, kNumel, values.data()).ok());
  values[5000] = std::numeric_limits<float>::quiet_NaN();  // block 1: careful
  for (const HistogramRange range :
       {HistogramRange{-0.3, 0.2}, HistogramRange{-0.5, 0.5},
        HistogramRange{0.1, 0.1}}) {
    for (int bins : {1, 7, 64}) {
      SCOPED_TRACE(testing::Message() << "[" << range.lower << ", "
                                      << range.upper << "] " << bins);
      WatchPartial partial = EmptyWatchPartial(bins, true);
      ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), kNumel,
                                         range, &partial)
                      .ok());
      std::vector<int64_t> slots(static_cast<size_t>(bins) + 2, 0);
      const double scale = WatchBinScale(range.lower, range.upper, bins);
      for (float value : values) {
        if (!std::isfinite(value)) continue;
        ++slots[static_cast<size_t>(
            WatchHistogramSlot(value, range.lower, range.upper, scale, bins))];
      }
      EXPECT_EQ(partial.below_range, slots.front());
      EXPECT_EQ(partial.above_range, slots.back());
      EXPECT_EQ(partial.histogram,
                std::vector<int64_t>(slots.begin() + 1, slots.end() - 1));
      EXPECT_EQ(partial.nan_count, 1);
    }
  }
}

}  // namespace
}  // namespace summon::core
