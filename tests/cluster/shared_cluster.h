// One cluster of real summond processes per topology, shared by a typed test
// suite's tests (each uses its own models): starting daemons costs more than
// the tests. 2 nodes x 2 ranks and 3 nodes x 1 rank.

#ifndef SUMMON_TESTS_CLUSTER_SHARED_CLUSTER_H_
#define SUMMON_TESTS_CLUSTER_SHARED_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {

struct TwoNodesTwoRanks {
  static constexpr int kNodes = 2;
  static constexpr int kLocalRanks = 2;
};

struct ThreeNodesOneRank {
  static constexpr int kNodes = 3;
  static constexpr int kLocalRanks = 1;
};

using ClusterTopologies = testing::Types<TwoNodesTwoRanks, ThreeNodesOneRank>;

// Names the typed tests "2x2" and "3x1".
class ClusterTopologyNames {
 public:
  template <typename Topology>
  static std::string GetName(int) {
    return absl::StrCat(Topology::kNodes, "x", Topology::kLocalRanks);
  }
};

template <typename Topology>
class SharedClusterTest : public testing::Test {
 public:
  const LocalCluster& cluster() const { return *cluster_; }
  const client::SummonClient& node(int n) const { return cluster_->client(n); }
  int nodes() const { return cluster_->nodes(); }
  int world() const { return cluster_->world_size(); }

 protected:
  static void SetUpTestSuite() {
    LocalCluster::Options options;
    options.nodes = Topology::kNodes;
    options.local_ranks = Topology::kLocalRanks;
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    if (started.ok()) {
      cluster_ = *std::move(started);
    } else {
      start_error_ = started.status().ToString();
    }
  }
  static void TearDownTestSuite() {
    if (cluster_ == nullptr) return;
    const absl::Status stopped = cluster_->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
    cluster_.reset();
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << start_error_; }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::string start_error_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_SHARED_CLUSTER_H_
