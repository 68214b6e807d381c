#include "core/tensor_stats.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace summon::core {
namespace {

TEST(TensorStatsTest, ExactNumbersForFloat32) {
  const float data[] = {1.0f, -2.0f, 3.0f, 0.5f, 2.0f};
  auto stats = ComputeTensorStatistics(core::DType::kFloat32, data, 5, 4);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->min, -2.0);
  EXPECT_EQ(stats->max, 3.0);
  EXPECT_DOUBLE_EQ(stats->mean, 4.5 / 5);
  EXPECT_DOUBLE_EQ(stats->l2_norm, std::sqrt(1 + 4 + 9 + 0.25 + 4));
  EXPECT_EQ(stats->nan_count, 0);
  // Bins of width 1.25 over [-2, 3]: -2 | 0.5, 1 | 2 | 3 (last bin closed).
  EXPECT_EQ(stats->histogram, (std::vector<int64_t>{1, 0, 2, 2}));
  EXPECT_EQ(stats->histogram_lower, -2.0);
  EXPECT_EQ(stats->histogram_upper, 3.0);
}

TEST(TensorStatsTest, NanAndInfAreCountedAndExcluded) {
  const double data[] = {std::numeric_limits<double>::quiet_NaN(), 4.0,
                         std::numeric_limits<double>::infinity(), -4.0,
                         -std::numeric_limits<double>::infinity()};
  auto stats = ComputeTensorStatistics(core::DType::kFloat64, data, 5, 2);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->nan_count, 1);
  EXPECT_EQ(stats->inf_count, 2);
  EXPECT_EQ(stats->finite_count, 2);
  EXPECT_EQ(stats->mean, 0.0);
  EXPECT_EQ(stats->l2_norm, std::sqrt(32.0));
  EXPECT_EQ(stats->histogram, (std::vector<int64_t>{1, 1}));
}

TEST(TensorStatsTest, BFloat16AndConstantTensor) {
  const uint16_t data[] = {core::FloatToBFloat16(1.5f),
                           core::FloatToBFloat16(1.5f)};
  auto stats = ComputeTensorStatistics(core::DType::kBFloat16, data, 2, 3);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->min, 1.5);
  EXPECT_EQ(stats->max, 1.5);
  EXPECT_EQ(stats->histogram, (std::vector<int64_t>{2, 0, 0}));
}

TEST(TensorStatsTest, RejectsIntegersAndBadBins) {
  const int32_t ints[] = {1};
  EXPECT_EQ(
      ComputeTensorStatistics(core::DType::kInt32, ints, 1, 4).status().code(),
      absl::StatusCode::kInvalidArgument);
  const float data[] = {1.0f};
  EXPECT_EQ(ComputeTensorStatistics(core::DType::kFloat32, data, 1, -1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeTensorStatistics(core::DType::kFloat32, data, 1, 4097)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorStatsTest, NoFiniteElementGivesNanAndZeroBinsNoHistogram) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float data[] = {nan, nan};
  auto stats = ComputeTensorStatistics(core::DType::kFloat32, data, 2, 0);
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(std::isnan(stats->min));
  EXPECT_TRUE(std::isnan(stats->mean));
  EXPECT_TRUE(std::isnan(stats->l2_norm));
  EXPECT_EQ(stats->nan_count, 2);
  EXPECT_TRUE(stats->histogram.empty());
  const float finite[] = {1.0f, 3.0f};
  auto plain = ComputeTensorStatistics(core::DType::kFloat32, finite, 2, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->mean, 2.0);
  EXPECT_TRUE(plain->histogram.empty());
}

}  // namespace
}  // namespace summon::core
