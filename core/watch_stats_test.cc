#include "core/watch_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

// numpy over tests/python/seeded.py's seeded_float32("layer.weight", 7,
// 1000) as float64: np.linalg.norm, mean, min, max, abs().max(), and
// np.histogram(v[(v >= -0.25) & (v <= 0.25)], 8, (-0.25, 0.25)) with the
// elements below and above that range.
constexpr double kNorm = 9.07949443579282;
constexpr double kSumOfSquares = 82.43721920959277;  // (v * v).sum()
constexpr double kMean = -0.0005806664824485779;
constexpr double kMin = -0.4993964433670044;
constexpr double kMax = 0.4995155930519104;
const std::vector<int64_t> kHistogram = {46, 69, 71, 61, 66, 67, 62, 45};
constexpr int64_t kBelow = 254;
constexpr int64_t kAbove = 259;
// np.histogram(v, 8, (v.min(), v.max())): the first record's range.
const std::vector<int64_t> kFullHistogram = {125, 129, 115, 132,
                                             133, 107, 138, 121};

std::vector<float> Seeded() {
  std::vector<float> values(1000);
  EXPECT_TRUE(
      FillSeeded("layer.weight", 7, DType::kFloat32, 0, 1000, values.data())
          .ok());
  return values;
}

// Three "nodes" holding uneven slices combine to numpy's numbers exactly.
TEST(WatchStatsTest, SlicesCombineToNumpysNumbers) {
  const std::vector<float> values = Seeded();
  const HistogramRange range{-0.25, 0.25};
  WatchPartial combined = EmptyWatchPartial(8, true);
  const int64_t cuts[] = {0, 333, 334, 1000};
  for (int node = 0; node < 3; ++node) {
    WatchPartial partial = EmptyWatchPartial(8, true);
    ASSERT_TRUE(
        AccumulateWatchPartial(DType::kFloat32, values.data() + cuts[node],
                               cuts[node + 1] - cuts[node], range, &partial)
            .ok());
    ASSERT_TRUE(CombineWatchPartials(partial, &combined).ok());
  }
  const WatchStatistics stats = FinishWatchStatistics(combined, range);
  EXPECT_EQ(stats.numel, 1000);
  EXPECT_EQ(stats.nan_count, 0);
  EXPECT_EQ(stats.inf_count, 0);
  // Squares of multiples of 2^-24 outgrow a double's mantissa when summed:
  // numpy (pairwise, BLAS nrm2) and the nodes' order differ in the last
  // bits only.
  EXPECT_NEAR(stats.l2_norm, kNorm, 1e-12);
  EXPECT_NEAR(combined.sum_of_squares, kSumOfSquares, 1e-11);
  // Sums of multiples of 2^-24 are exact in double: the mean is bit-exact.
  EXPECT_EQ(stats.mean, kMean);
  EXPECT_EQ(stats.min, kMin);
  EXPECT_EQ(stats.max, kMax);
  EXPECT_EQ(stats.abs_max, kMax);
  EXPECT_EQ(stats.histogram, kHistogram);
  EXPECT_EQ(stats.below_range, kBelow);
  EXPECT_EQ(stats.above_range, kAbove);
  ASSERT_TRUE(stats.range.has_value());
  EXPECT_EQ(stats.range->lower, -0.25);
}

// The first record: a pass without a range finds min and max, the second
// bins over them, as numpy's np.histogram(v, 8) does.
TEST(WatchStatsTest, FirstPassFixesTheRange) {
  const std::vector<float> values = Seeded();
  WatchPartial first = EmptyWatchPartial(8, false);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), 1000,
                                     std::nullopt, &first)
                  .ok());
  EXPECT_TRUE(first.histogram.empty());
  const WatchStatistics found = FinishWatchStatistics(first, std::nullopt);
  const std::optional<HistogramRange> range = NextHistogramRange(found);
  ASSERT_TRUE(range.has_value());
  EXPECT_EQ(range->lower, kMin);
  EXPECT_EQ(range->upper, kMax);
  WatchPartial second = EmptyWatchPartial(8, true);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), 1000,
                                     range, &second)
                  .ok());
  EXPECT_EQ(FinishWatchStatistics(second, range).histogram, kFullHistogram);
  EXPECT_EQ(second.below_range + second.above_range, 0);
}

TEST(WatchStatsTest, NonFiniteElementsAreCountedAndLeftOut) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {3, nan, -4, inf, -inf, 0};
  WatchPartial partial = EmptyWatchPartial(2, true);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), 6,
                                     HistogramRange{-4, 4}, &partial)
                  .ok());
  const WatchStatistics stats =
      FinishWatchStatistics(partial, HistogramRange{-4, 4});
  EXPECT_EQ(stats.numel, 6);
  EXPECT_EQ(stats.nan_count, 1);
  EXPECT_EQ(stats.inf_count, 2);
  EXPECT_EQ(stats.l2_norm, 5);
  EXPECT_EQ(stats.mean, -1.0 / 3);
  EXPECT_EQ(stats.min, -4);
  EXPECT_EQ(stats.max, 3);
  EXPECT_EQ(stats.abs_max, 4);
  EXPECT_EQ(stats.histogram, (std::vector<int64_t>{1, 2}));
}

TEST(WatchStatsTest, NoFiniteElementGivesNaNAndNoNextRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {nan, nan};
  WatchPartial partial = EmptyWatchPartial(4, false);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), 2,
                                     std::nullopt, &partial)
                  .ok());
  // An empty node's partial changes nothing when combined.
  ASSERT_TRUE(CombineWatchPartials(EmptyWatchPartial(4, false), &partial).ok());
  const WatchStatistics stats = FinishWatchStatistics(partial, std::nullopt);
  EXPECT_EQ(stats.nan_count, 2);
  EXPECT_TRUE(std::isnan(stats.l2_norm));
  EXPECT_TRUE(std::isnan(stats.abs_max));
  EXPECT_FALSE(NextHistogramRange(stats).has_value());
}

TEST(WatchStatsTest, RefusesIntegersAndMismatchedBins) {
  const int32_t values[] = {1, 2};
  WatchPartial partial = EmptyWatchPartial(4, true);
  EXPECT_EQ(
      AccumulateWatchPartial(DType::kInt32, values, 2, std::nullopt, &partial)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CombineWatchPartials(EmptyWatchPartial(3, true), &partial).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WatchStatsTest, HalfPrecisionShardsConvertExactly) {
  // bfloat16 bit patterns of 1.5 and -2.
  const uint16_t values[] = {0x3FC0, 0xC000};
  WatchPartial partial = EmptyWatchPartial(0, false);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kBFloat16, values, 2, std::nullopt,
                                     &partial)
                  .ok());
  EXPECT_EQ(partial.sum, -0.5);
  EXPECT_EQ(partial.sum_of_squares, 6.25);
}

// The histogram as the reference formula bins it: floor((v - lower) *
// per_width) in double, the last bin closed, written out here so that it
// checks the float32 binning rather than repeating it.
struct ReferenceHistogram {
  std::vector<int64_t> bins;
  int64_t below = 0;
  int64_t above = 0;
};
ReferenceHistogram BinInDouble(const std::vector<float>& values,
                               const HistogramRange& range, int bins) {
  ReferenceHistogram reference;
  reference.bins.assign(static_cast<size_t>(bins), 0);
  const double per_width = 1 / ((range.upper - range.lower) / bins);
  for (const float value : values) {
    if (value < range.lower) {
      ++reference.below;
    } else if (value > range.upper) {
      ++reference.above;
    } else {
      ++reference.bins[static_cast<size_t>(std::min(
          static_cast<int>((value - range.lower) * per_width), bins - 1))];
    }
  }
  return reference;
}

// float32 is binned in float: elements on and next to every bin edge (the
// ones a float position could put in the neighbouring bin) land where the
// double formula puts them, over a range of float edges (float binning)
// and one whose edges are not floats (double binning).
TEST(WatchStatsTest, FloatBinningMatchesTheDoubleFormulaAtBinEdges) {
  std::vector<float> values = Seeded();
  for (const HistogramRange& range :
       {HistogramRange{kMin, kMax}, HistogramRange{-0.3, 0.4},
        HistogramRange{1000.0f, 1000.5f}}) {
    for (const int bins : {7, 32, 1000}) {
      const double width = (range.upper - range.lower) / bins;
      std::vector<float> edges = values;
      for (int k = 0; k <= bins; ++k) {
        const float edge = static_cast<float>(range.lower + k * width);
        float below = edge;
        float above = edge;
        for (int step = 0; step < 3; ++step) {
          edges.push_back(below);
          edges.push_back(above);
          below = std::nextafter(below, -1e30f);
          above = std::nextafter(above, 1e30f);
        }
      }
      WatchPartial partial = EmptyWatchPartial(bins, true);
      ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, edges.data(),
                                         static_cast<int64_t>(edges.size()),
                                         range, &partial)
                      .ok());
      const ReferenceHistogram reference = BinInDouble(edges, range, bins);
      EXPECT_EQ(partial.histogram, reference.bins)
          << "range [" << range.lower << ", " << range.upper << "], " << bins
          << " bins";
      EXPECT_EQ(partial.below_range, reference.below);
      EXPECT_EQ(partial.above_range, reference.above);
    }
  }
}

// bfloat16 goes the float32 way: the same bins as its float32 values.
TEST(WatchStatsTest, HalfPrecisionBinsAsItsFloatValues) {
  const std::vector<float> values = Seeded();
  std::vector<uint16_t> bf16(values.size());
  ASSERT_TRUE(ConvertElements(DType::kFloat32, values.data(), DType::kBFloat16,
                              bf16.data(), static_cast<int64_t>(values.size()))
                  .ok());
  std::vector<float> rounded(values.size());
  ASSERT_TRUE(ConvertElements(DType::kBFloat16, bf16.data(), DType::kFloat32,
                              rounded.data(),
                              static_cast<int64_t>(values.size()))
                  .ok());
  const HistogramRange range{-0.25, 0.25};
  WatchPartial partial = EmptyWatchPartial(8, true);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kBFloat16, bf16.data(),
                                     static_cast<int64_t>(bf16.size()), range,
                                     &partial)
                  .ok());
  const ReferenceHistogram reference = BinInDouble(rounded, range, 8);
  EXPECT_EQ(partial.histogram, reference.bins);
  EXPECT_EQ(partial.below_range, reference.below);
  EXPECT_EQ(partial.above_range, reference.above);
}

// Whole blocks go through the vectorised path, a block holding a NaN or an
// Inf through the element-by-element one; both add up to what one element
// at a time gives (float32 sums in double are exact, so the sums too).
TEST(WatchStatsTest, BlocksWithNonFiniteElementsMatchElementwise) {
  const int64_t numel = 3 * 4096 + 17;
  std::vector<float> values(static_cast<size_t>(numel));
  ASSERT_TRUE(
      FillSeeded("layer.weight", 7, DType::kFloat32, 0, numel, values.data())
          .ok());
  values[5000] = std::numeric_limits<float>::quiet_NaN();
  values[9000] = -std::numeric_limits<float>::infinity();
  values[numel - 1] = 0.25f;  // On the range's upper edge: the last bin.
  const HistogramRange range{-0.25, 0.25};
  WatchPartial whole = EmptyWatchPartial(8, true);
  ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, values.data(), numel,
                                     range, &whole)
                  .ok());
  WatchPartial elementwise = EmptyWatchPartial(8, true);
  for (int64_t i = 0; i < numel; ++i) {
    ASSERT_TRUE(AccumulateWatchPartial(DType::kFloat32, &values[i], 1, range,
                                       &elementwise)
                    .ok());
  }
  EXPECT_EQ(whole.numel, numel);
  EXPECT_EQ(whole.finite, numel - 2);
  EXPECT_EQ(whole.nan_count, 1);
  EXPECT_EQ(whole.inf_count, 1);
  EXPECT_EQ(whole.finite, elementwise.finite);
  EXPECT_EQ(whole.sum, elementwise.sum);
  EXPECT_NEAR(whole.sum_of_squares, elementwise.sum_of_squares, 1e-10);
  EXPECT_EQ(whole.min, elementwise.min);
  EXPECT_EQ(whole.max, elementwise.max);
  EXPECT_EQ(whole.abs_max, elementwise.abs_max);
  EXPECT_EQ(whole.histogram, elementwise.histogram);
  EXPECT_EQ(whole.below_range, elementwise.below_range);
  EXPECT_EQ(whole.above_range, elementwise.above_range);
  int64_t counted = whole.below_range + whole.above_range;
  for (int64_t count : whole.histogram) counted += count;
  EXPECT_EQ(counted, numel - 2);
}

}  // namespace
}  // namespace summon::core
