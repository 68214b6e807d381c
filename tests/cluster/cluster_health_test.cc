// A model's health on a cluster is the cluster's (issue 20): a follower's
// segment unlinked by another process makes the model DEGRADED, and a
// follower restarted without its shards makes it MISSING_SHARDS, as every
// node's ListModels and DescribeModel report, with the follower named.

#include <sys/mman.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

template <typename Topology>
class ClusterHealthTest : public testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options options;
    options.nodes = Topology::kNodes;
    options.local_ranks = Topology::kLocalRanks;
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }
  void TearDown() override {
    if (cluster_ == nullptr) return;
    const absl::Status stopped = cluster_->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }

  LocalCluster& cluster() { return *cluster_; }
  // The last node: a follower on every topology.
  int follower() const { return cluster_->nodes() - 1; }
  // A rank of the follower.
  int follower_rank() const { return follower() * cluster_->local_ranks(); }

  // Every node's ListModels and DescribeModel say `state` and `detail` for
  // `model`.
  void ExpectEverywhere(const std::string& model, v1::ModelState state,
                        const std::string& detail) {
    for (int node = 0; node < cluster_->nodes(); ++node) {
      absl::StatusOr<v1::ListModelsResponse> listed =
          cluster_->client(node).ListModels();
      ASSERT_TRUE(listed.ok()) << "node " << node << ": " << listed.status();
      bool found = false;
      for (const v1::ModelSummary& summary : listed->models()) {
        if (summary.name() != model) continue;
        found = true;
        EXPECT_EQ(v1::ModelState_Name(summary.state()),
                  v1::ModelState_Name(state))
            << "ListModels through node " << node;
        EXPECT_EQ(summary.state_detail(), detail)
            << "ListModels through node " << node;
      }
      EXPECT_TRUE(found) << "node " << node << " does not list " << model;
      absl::StatusOr<v1::Model> described =
          cluster_->client(node).DescribeModel(model);
      ASSERT_TRUE(described.ok())
          << "node " << node << ": " << described.status();
      EXPECT_EQ(v1::ModelState_Name(described->state()),
                v1::ModelState_Name(state))
          << "DescribeModel through node " << node;
      EXPECT_EQ(described->state_detail(), detail)
          << "DescribeModel through node " << node;
    }
  }

 private:
  std::unique_ptr<LocalCluster> cluster_;
};

TYPED_TEST_SUITE(ClusterHealthTest, ClusterTopologies, ClusterTopologyNames);

TYPED_TEST(ClusterHealthTest, FollowersSegmentsDecideTheModelsState) {
  CreateSeeded(this->cluster().client(0), "m", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  CreateSeeded(this->cluster().client(0), "other", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  this->ExpectEverywhere("m", v1::MODEL_STATE_READY, "");

  // What multiprocessing.shared_memory does at a trainer's exit, on the
  // follower's host.
  absl::StatusOr<v1::MapShardsResponse> mapped =
      this->cluster()
          .client(this->follower())
          .MapShards("m", this->follower_rank());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const std::string segment = mapped->segment_name();
  ASSERT_EQ(shm_unlink(segment.c_str()), 0) << segment;
  this->ExpectEverywhere(
      "m", v1::MODEL_STATE_DEGRADED,
      absl::StrCat("node ", this->follower(), ": segment ", segment,
                   " was unlinked from /dev/shm by another process; its "
                   "data lives only until this daemon exits: save the model "
                   "now"));
  this->ExpectEverywhere("other", v1::MODEL_STATE_READY, "");

  // The follower's machine fails and its daemon comes back: the segment is
  // gone, so its ranks have no shards for the model.
  ASSERT_TRUE(this->cluster().Kill(this->follower()).ok());
  const absl::Status restarted = this->cluster().StartNode(this->follower());
  ASSERT_TRUE(restarted.ok()) << restarted;
  // The leader hears the re-join within a few heartbeats, and until it has
  // re-formed the cluster on the new incarnation, calls answer UNAVAILABLE
  // ("node 2 restarted ... the cluster re-forms"), as a client retries.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  auto everyone_answers = [this] {
    const absl::StatusOr<v1::ListModelsResponse> listed =
        this->cluster().client(0).ListModels();
    if (!listed.ok() || listed->nodes_down_size() != 0) return false;
    for (int node = 0; node < this->cluster().nodes(); ++node) {
      if (absl::IsUnavailable(
              this->cluster().client(node).DescribeModel("m").status())) {
        return false;
      }
    }
    return true;
  };
  while (absl::Now() < give_up && !everyone_answers()) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  // The follower's re-attach names what it found: with another rank's
  // segment still there (2x2) it leaves that one alone.
  const std::string found =
      this->cluster().local_ranks() == 1
          ? absl::StrCat(
                "model 'm' has no shards in shared memory (no "
                "segment ",
                segment, ")")
          : absl::StrCat(
                "model 'm' has shared-memory params ",
                absl::StrReplaceAll(
                    segment,
                    {{absl::StrCat("-r", this->follower_rank(), "-"),
                      absl::StrCat("-r", this->follower_rank() + 1, "-")}}),
                " but not ", segment,
                "; they are left untouched (remove the model's "
                "segments to start over)");
  const std::string missing =
      absl::StrCat("node ", this->follower(), ": ", found,
                   "; recover with `summonctl model load m --from "
                   "CHECKPOINT` or `summonctl model delete m`");
  this->ExpectEverywhere("m", v1::MODEL_STATE_MISSING_SHARDS, missing);
  this->ExpectEverywhere("other", v1::MODEL_STATE_READY, "");
  // Sessions on it are refused through every node, naming the follower,
  // before any node enters the gather: the other model's gathers still work
  // (a follower refusing its part of a collective would leave the others
  // waiting in it until the communicator broke).
  for (int node = 0; node < this->cluster().nodes(); ++node) {
    const absl::StatusOr<v1::Session> refused =
        this->cluster().client(node).OpenSession("m", ReadOnly());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
        << "node " << node << ": " << refused.status();
    EXPECT_EQ(refused.status().message(),
              absl::StrCat("model 'm' is MISSING_SHARDS: ", missing))
        << "node " << node;
  }
  const v1::Session session =
      OpenOk(this->cluster().client(this->follower()), "other", ReadOnly());
  EXPECT_EQ(ReadOk(this->cluster().client(this->follower()), session.id(),
                   "layers.1.w"),
            FloatBytes(SeededFloats("layers.1.w", 7 * 5)));
  CloseOk(this->cluster().client(this->follower()), session.id());

  // The recovery the detail names: a delete removes it from every node, and
  // a new one of the same name is READY everywhere.
  const absl::Status deleted =
      this->cluster().client(0).DeleteModel("m").status();
  ASSERT_TRUE(deleted.ok()) << deleted;
  CreateSeeded(this->cluster().client(0), "m", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  this->ExpectEverywhere("m", v1::MODEL_STATE_READY, "");
}

// Read-only listings with a follower down (issue 33): `model list` and
// `watch list` answer from what the cluster knows, naming the node that is
// down, instead of UNAVAILABLE; and once it is back, nothing is marked.
TYPED_TEST(ClusterHealthTest, ListingsWithAFollowerDownNameIt) {
  CreateSeeded(this->cluster().client(0), "m", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  v1::AddWatchRequest watch;
  watch.set_model("m");
  watch.add_params("layers.1.w");
  ASSERT_TRUE(this->cluster().client(0).AddWatch(watch).ok());
  ASSERT_TRUE(this->cluster().Kill(this->follower()).ok());
  for (int node = 0; node < this->cluster().nodes(); ++node) {
    if (node == this->follower()) continue;
    const absl::StatusOr<v1::ListModelsResponse> models =
        this->cluster().client(node).ListModels();
    ASSERT_TRUE(models.ok()) << "node " << node << ": " << models.status();
    ASSERT_EQ(models->models_size(), 1);
    EXPECT_EQ(models->models(0).name(), "m");
    EXPECT_EQ(std::vector<int>(models->nodes_down().begin(),
                               models->nodes_down().end()),
              std::vector<int>{this->follower()})
        << "node " << node;
    const absl::StatusOr<v1::ListWatchesResponse> watches =
        this->cluster().client(node).ListWatches();
    ASSERT_TRUE(watches.ok()) << "node " << node << ": " << watches.status();
    ASSERT_EQ(watches->watches_size(), 1);
    EXPECT_EQ(watches->watches(0).model(), "m");
    EXPECT_EQ(std::vector<int>(watches->nodes_down().begin(),
                               watches->nodes_down().end()),
              std::vector<int>{this->follower()})
        << "node " << node;
  }
  ASSERT_TRUE(this->cluster().StartNode(this->follower()).ok());
  const absl::StatusOr<v1::ListModelsResponse> back =
      this->cluster().client(this->follower()).ListModels();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->nodes_down_size(), 0);
  EXPECT_EQ(back->models(0).state(), v1::MODEL_STATE_READY);
}

}  // namespace
}  // namespace summon::tests
