// Watches on clusters of real summond processes (issue 21): every node
// reduces its own ranks' slices and the leader combines them, so a record
// equals the statistics of the whole seeded tensor under every strategy:
// sharded across nodes (FULL_SHARD), replicated across nodes (HYBRID_SHARD,
// NO_SHARD: each element counted once, not once per replica). A watch added
// through a follower lands on the leader.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

template <typename Topology>
class ClusterWatchTest : public SharedClusterTest<Topology> {
 public:
  void Step(const std::string& model, int64_t step) const {
    for (v1::TrainingPhase phase :
         {v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
          v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
          v1::TRAINING_PHASE_IDLE}) {
      for (int rank = 0; rank < this->world(); ++rank) {
        const int node = this->cluster().NodeOf(rank);
        ASSERT_TRUE(this->node(node).ReportPhase(model, rank, phase, step).ok())
            << "rank " << rank;
      }
    }
  }
  // The records of `param`, once `count` are there (the leader's worker
  // records off the trainer's path).
  v1::ShowWatchResponse Records(const std::string& model,
                                const std::string& param, int count) const {
    v1::ShowWatchRequest request;
    request.set_model(model);
    request.set_param(param);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (true) {
      absl::StatusOr<v1::ShowWatchResponse> shown =
          this->node(1).ShowWatch(request);
      EXPECT_TRUE(shown.ok()) << shown.status();
      if (!shown.ok() || shown->records_size() >= count ||
          absl::Now() > deadline) {
        return shown.ok() ? *shown : v1::ShowWatchResponse();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
};

TYPED_TEST_SUITE(ClusterWatchTest, ClusterTopologies, ClusterTopologyNames);

TYPED_TEST(ClusterWatchTest, NodesCombineToTheWholeTensorUnderEveryStrategy) {
  for (const v1::ShardingStrategy strategy :
       {v1::SHARDING_STRATEGY_FULL_SHARD, v1::SHARDING_STRATEGY_HYBRID_SHARD,
        v1::SHARDING_STRATEGY_NO_SHARD}) {
    const std::string model =
        absl::StrCat("watched-", v1::ShardingStrategy_Name(strategy).substr(18));
    SCOPED_TRACE(model);
    CreateSeeded(this->node(0), model, kUnevenLayout, strategy);
    v1::AddWatchRequest add;
    add.set_model(model);
    add.add_params("layers.*");
    add.add_params("embed.w");
    add.set_histogram_bins(4);
    absl::StatusOr<v1::Watch> watch = this->node(1).AddWatch(add);
    ASSERT_TRUE(watch.ok()) << watch.status();
    EXPECT_EQ(watch->watched_size(), 5);
    this->Step(model, 1);
    for (const auto& [fqn, numel] :
         std::vector<std::pair<std::string, int64_t>>{
             {"embed.w", 36}, {"layers.0.attn.w", 25}, {"layers.1.w", 35}}) {
      const std::vector<float> values = SeededFloats(fqn, numel);
      double sum = 0;
      double squares = 0;
      for (float value : values) {
        sum += value;
        squares += static_cast<double>(value) * value;
      }
      const double min = *std::min_element(values.begin(), values.end());
      const double max = *std::max_element(values.begin(), values.end());
      std::vector<int64_t> bins(4, 0);
      for (float value : values) {
        const int bin = std::min(
            3, static_cast<int>((value - min) / ((max - min) / 4)));
        ++bins[static_cast<size_t>(bin)];
      }
      const v1::ShowWatchResponse shown = this->Records(model, fqn, 1);
      ASSERT_EQ(shown.records_size(), 1) << fqn;
      const v1::WatchRecord& record = shown.records(0);
      EXPECT_EQ(record.step(), 1);
      EXPECT_EQ(record.numel(), numel) << fqn;  // not once per replica
      EXPECT_EQ(record.mean(), sum / static_cast<double>(numel)) << fqn;
      EXPECT_DOUBLE_EQ(record.l2_norm(), std::sqrt(squares)) << fqn;
      EXPECT_EQ(record.min(), min) << fqn;
      EXPECT_EQ(record.max(), max) << fqn;
      EXPECT_EQ(std::vector<int64_t>(record.histogram().counts().begin(),
                                     record.histogram().counts().end()),
                bins)
          << fqn;
    }
    ASSERT_TRUE(this->node(0).RemoveWatch(model).ok());
    ASSERT_TRUE(this->node(0).DeleteModel(model).ok());
  }
}

}  // namespace
}  // namespace summon::tests
