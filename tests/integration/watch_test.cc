// Watch records on each shard placement (issue 21): host shared memory
// (watch_test), the fake device (watch_test_on_device: the host-copy
// fallback of ShardMemory::AccumulateWatch on a CPU) and, with
// SUMMON_TEST_DEVICE=cuda on a GPU (tests/gpu/run_on_gpu.sh), device memory
// reduced by the CUDA watch kernels. Whatever the placement, a record is
// the statistics of the seeded tensor, its gradient's too, and a NaN and an
// Inf written between two steps are counted and left out of the rest.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kBins = 4;

class WatchTest : public SummondTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartServer(4)); }

  void Step(int64_t step) {
    for (int rank = 0; rank < 4; ++rank) {
      ASSERT_TRUE(WalkPhases("m", rank, FullStep(), step).ok()) << rank;
    }
  }

  // The records of `fqn` (or its gradient) once `count` are there: the
  // daemon's worker records off the trainer's path.
  pb::ShowWatchResponse Records(const std::string& fqn, bool grad, int count) {
    pb::ShowWatchRequest request;
    request.set_model("m");
    request.set_param(fqn);
    request.set_grad(grad);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (true) {
      grpc::ClientContext context;
      pb::ShowWatchResponse response;
      const grpc::Status status =
          summon_->ShowWatch(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok() || response.records_size() >= count ||
          absl::Now() > deadline) {
        return response;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
};

// What a record of `values` must say, its histogram over [lower, upper].
void ExpectRecord(const pb::WatchRecord& record,
                  const std::vector<float>& values, double lower,
                  double upper) {
  double sum = 0;
  double squares = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -min;
  double abs_max = 0;
  int64_t finite = 0;
  int64_t nan = 0;
  int64_t inf = 0;
  for (float value : values) {
    if (std::isnan(value)) {
      ++nan;
      continue;
    }
    if (std::isinf(value)) {
      ++inf;
      continue;
    }
    ++finite;
    sum += value;
    squares += static_cast<double>(value) * value;
    min = std::min<double>(min, value);
    max = std::max<double>(max, value);
    abs_max = std::max<double>(abs_max, std::fabs(value));
  }
  std::vector<int64_t> bins(kBins, 0);
  for (float value : values) {
    if (!std::isfinite(value)) continue;
    const int bin =
        std::min(kBins - 1,
                 static_cast<int>((value - lower) / ((upper - lower) / kBins)));
    ++bins[static_cast<size_t>(bin)];
  }
  EXPECT_EQ(record.numel(), static_cast<int64_t>(values.size()));
  EXPECT_EQ(record.nan_count(), nan);
  EXPECT_EQ(record.inf_count(), inf);
  EXPECT_DOUBLE_EQ(record.mean(), sum / static_cast<double>(finite));
  EXPECT_DOUBLE_EQ(record.l2_norm(), std::sqrt(squares));
  EXPECT_EQ(record.min(), min);
  EXPECT_EQ(record.max(), max);
  EXPECT_EQ(record.abs_max(), abs_max);
  EXPECT_EQ(record.histogram().lower(), lower);
  EXPECT_EQ(record.histogram().upper(), upper);
  EXPECT_EQ(std::vector<int64_t>(record.histogram().counts().begin(),
                                 record.histogram().counts().end()),
            bins);
  EXPECT_EQ(record.below_range(), 0);
  EXPECT_EQ(record.above_range(), 0);
}

TEST_F(WatchTest, RecordsAreTheSeededStatisticsOnEveryPlacement) {
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kBlocksLayout,
               std::vector<int>{});
  pb::AddWatchRequest add;
  add.set_model("m");
  add.add_params("layers.*");
  add.add_params("embed.w");
  add.set_histogram_bins(kBins);
  add.set_grads(true);
  {
    grpc::ClientContext context;
    pb::Watch watch;
    const grpc::Status added = summon_->AddWatch(&context, add, &watch);
    ASSERT_TRUE(added.ok()) << added.error_message();
    EXPECT_EQ(watch.watched_size(), 5);
  }
  ASSERT_NO_FATAL_FAILURE(Step(1));
  // The first record bins over its own range pass's [min, max]; every slice
  // of the uneven layout (crossing ranks) counted once.
  for (const auto& [fqn, numel] : std::vector<std::pair<std::string, int64_t>>{
           {"embed.w", 40}, {"layers.0.attn.w", 25}, {"layers.1.w", 35}}) {
    for (const bool grad : {false, true}) {
      SCOPED_TRACE(fqn + (grad ? " grad" : ""));
      const std::vector<float> values =
          grad ? Seeded(fqn + ".grad", numel, kGradSeed) : Seeded(fqn, numel);
      const auto [low, high] =
          std::minmax_element(values.begin(), values.end());
      const pb::ShowWatchResponse shown = Records(fqn, grad, 1);
      ASSERT_EQ(shown.records_size(), 1);
      EXPECT_EQ(shown.records(0).step(), 1);
      ExpectRecord(shown.records(0), values, *low, *high);
      EXPECT_EQ(shown.first_nonfinite_step(), -1);
    }
  }

  // A NaN and an Inf written between the steps: counted at step 2, left out
  // of the rest, the histogram on step 1's range.
  std::vector<float> values = Seeded("layers.1.w", 35);
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  const double lower = *low;
  const double upper = *high;
  {
    const pb::Session writer = Open("m", ModuleScope("layers.1"));
    ASSERT_TRUE(WriteFloats(writer.id(), "layers.1.w",
                            {std::numeric_limits<float>::quiet_NaN()}, false, 3)
                    .ok());
    ASSERT_TRUE(WriteFloats(writer.id(), "layers.1.w",
                            {std::numeric_limits<float>::infinity()}, false, 30)
                    .ok());
    Close(writer.id());
  }
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[30] = std::numeric_limits<float>::infinity();
  ASSERT_NO_FATAL_FAILURE(Step(2));
  const pb::ShowWatchResponse shown = Records("layers.1.w", false, 2);
  ASSERT_EQ(shown.records_size(), 2);
  EXPECT_EQ(shown.records(1).step(), 2);
  ExpectRecord(shown.records(1), values, lower, upper);
  EXPECT_EQ(shown.first_nonfinite_step(), 2);
}

}  // namespace
}  // namespace summon::tests
