// Watches survive the loss of the leader (issue 21): every follower keeps a
// copy of the leader's watches and their history in its own data dir, so a
// leader restarted without its watch files (a lost or replaced disk) serves
// `watch list` and `watch show` with the whole history again, and the next
// records continue at the right step. A removal reaches the followers too,
// so no follower's copy brings a removed watch back. Real summond processes,
// 3 nodes x 1 rank (two followers, either of which can give it back).

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;
namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;

const std::vector<std::string> kWatched = {"layers.0.attn.w", "layers.0.attn.b",
                                           "layers.0.mlp.w", "layers.1.w"};

class ClusterWatchFailoverTest : public testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options options;
    options.nodes = 3;
    options.local_ranks = 1;
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      const absl::Status stopped = cluster_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
  }

  const client::SummonClient& node(int n) const { return cluster_->client(n); }

  void Step(const std::string& model, int64_t step) const {
    for (v1::TrainingPhase phase :
         {v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
          v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
          v1::TRAINING_PHASE_IDLE}) {
      for (int rank = 0; rank < cluster_->world_size(); ++rank) {
        const absl::Status reported =
            node(cluster_->NodeOf(rank))
                .ReportPhase(model, rank, phase, step)
                .status();
        ASSERT_TRUE(reported.ok()) << "rank " << rank << ": " << reported;
      }
    }
  }

  // Every watched parameter's records once each has `count` (the leader's
  // worker records off the trainer's path), asked through node `through`.
  std::vector<v1::ShowWatchResponse> Histories(const std::string& model,
                                               int count,
                                               int through = 1) const {
    std::vector<v1::ShowWatchResponse> histories;
    for (const std::string& param : kWatched) {
      v1::ShowWatchRequest request;
      request.set_model(model);
      request.set_param(param);
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      absl::StatusOr<v1::ShowWatchResponse> shown;
      while (true) {
        shown = node(through).ShowWatch(request);
        if ((shown.ok() && shown->records_size() >= count) ||
            absl::Now() > deadline) {
          break;
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
      EXPECT_TRUE(shown.ok()) << param << ": " << shown.status();
      histories.push_back(shown.ok() ? *shown : v1::ShowWatchResponse());
    }
    return histories;
  }

  // Waits until every follower's file holds step `step`: the leader sends a
  // record right after storing it, so `watch show` can answer it a moment
  // before the followers hold it (a leader lost in that moment loses that
  // one record).
  void WaitFollowersHold(const std::string& model, int64_t step) const {
    for (int follower = 1; follower < cluster_->nodes(); ++follower) {
      const fs::path file = fs::path(cluster_->data_dir(follower)) /
                            "watches" / (model + ".json");
      const std::string wanted = absl::StrCat("\"last_step\":", step, ",");
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      std::string text;
      while (absl::Now() < deadline) {
        std::ifstream in(file);
        text.assign(std::istreambuf_iterator<char>(in),
                    std::istreambuf_iterator<char>());
        if (text.find(wanted) != std::string::npos) break;
        absl::SleepFor(absl::Milliseconds(20));
      }
      EXPECT_NE(text.find(wanted), std::string::npos)
          << "node " << follower << ": " << text.substr(0, 300);
    }
  }

  // The leader's machine fails and comes back with its watch files gone.
  void RestartLeaderWithoutWatchFiles() {
    ASSERT_TRUE(cluster_->Kill(0).ok());
    const fs::path watches = fs::path(cluster_->data_dir(0)) / "watches";
    ASSERT_TRUE(fs::exists(watches));
    fs::remove_all(watches);
    const absl::Status restarted = cluster_->StartNode(0);
    ASSERT_TRUE(restarted.ok()) << restarted;
  }

  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(ClusterWatchFailoverTest, ALeaderWithoutItsFilesServesTheHistoryAgain) {
  const std::string model = "failover";
  CreateSeeded(node(0), model, kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  v1::AddWatchRequest add;
  add.set_model(model);
  add.add_params("layers.*");
  add.set_histogram_bins(4);
  const absl::StatusOr<v1::Watch> watch = node(1).AddWatch(add);
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_EQ(watch->watched_size(), static_cast<int>(kWatched.size()));
  for (int64_t step = 1; step <= 3; ++step) {
    Step(model, step);
    Histories(model, static_cast<int>(step));  // One record per step.
  }
  const std::vector<v1::ShowWatchResponse> before = Histories(model, 3);
  const absl::StatusOr<v1::ListWatchesResponse> listed = node(2).ListWatches();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->watches_size(), 1);
  EXPECT_EQ(listed->watches(0).last_step(), 3);
  // Each follower keeps its copy in its own data dir.
  WaitFollowersHold(model, 3);

  RestartLeaderWithoutWatchFiles();
  if (HasFatalFailure()) return;
  const absl::StatusOr<v1::ListWatchesResponse> relisted =
      node(0).ListWatches();
  ASSERT_TRUE(relisted.ok()) << relisted.status();
  ASSERT_EQ(relisted->watches_size(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(relisted->watches(0),
                                         listed->watches(0)))
      << relisted->watches(0).DebugString() << " vs "
      << listed->watches(0).DebugString();
  const std::vector<v1::ShowWatchResponse> after = Histories(model, 3, 0);
  for (size_t i = 0; i < kWatched.size(); ++i) {
    ASSERT_EQ(after[i].records_size(), 3) << kWatched[i];
    EXPECT_TRUE(MessageDifferencer::Equals(after[i], before[i]))
        << kWatched[i] << ":\n"
        << after[i].DebugString() << "vs\n"
        << before[i].DebugString();
  }
  // The leader wrote what it took back into its own data dir.
  EXPECT_TRUE(fs::exists(fs::path(cluster_->data_dir(0)) / "watches" /
                         (model + ".json")));

  // Training goes on: steps 4 and 5 are recorded after the three it got
  // back, on every node.
  Step(model, 4);
  Histories(model, 4);
  Step(model, 5);
  const std::vector<v1::ShowWatchResponse> continued = Histories(model, 5);
  WaitFollowersHold(model, 5);
  for (size_t i = 0; i < kWatched.size(); ++i) {
    const v1::ShowWatchResponse& shown = continued[i];
    ASSERT_EQ(shown.records_size(), 5) << kWatched[i];
    for (int r = 0; r < 5; ++r) {
      EXPECT_EQ(shown.records(r).step(), r + 1) << kWatched[i];
    }
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(MessageDifferencer::Equals(shown.records(r),
                                             before[i].records(r)))
          << kWatched[i] << " step " << r + 1;
    }
    // Nobody wrote the shards: the same statistics at every step.
    for (int r = 3; r < 5; ++r) {
      EXPECT_EQ(shown.records(r).numel(), before[i].records(0).numel());
      EXPECT_EQ(shown.records(r).l2_norm(), before[i].records(0).l2_norm());
      EXPECT_EQ(shown.records(r).min(), before[i].records(0).min());
      EXPECT_EQ(shown.records(r).max(), before[i].records(0).max());
      EXPECT_EQ(shown.records(r).histogram().counts_size(), 4);
    }
  }
  // And the followers hold steps 4 and 5 too: a second loss of the leader
  // loses nothing either.
  RestartLeaderWithoutWatchFiles();
  if (HasFatalFailure()) return;
  const std::vector<v1::ShowWatchResponse> again = Histories(model, 5, 0);
  for (size_t i = 0; i < kWatched.size(); ++i) {
    ASSERT_EQ(again[i].records_size(), 5) << kWatched[i];
    EXPECT_TRUE(MessageDifferencer::Equals(again[i], continued[i]))
        << kWatched[i];
  }
}

TEST_F(ClusterWatchFailoverTest, ARemovedWatchStaysRemoved) {
  const std::string model = "removed";
  CreateSeeded(node(0), model, kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  v1::AddWatchRequest add;
  add.set_model(model);
  add.add_params("layers.*");
  ASSERT_TRUE(node(0).AddWatch(add).ok());
  Step(model, 1);
  Histories(model, 1);
  WaitFollowersHold(model, 1);
  ASSERT_TRUE(node(2).RemoveWatch(model).ok());
  // Every follower still had the watch before the removal; none gives it
  // back to a leader that lost its files.
  RestartLeaderWithoutWatchFiles();
  if (HasFatalFailure()) return;
  const absl::StatusOr<v1::ListWatchesResponse> listed = node(1).ListWatches();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->watches_size(), 0) << listed->DebugString();
  Step(model, 2);
  // A new watch of the model starts a fresh history on every node.
  ASSERT_TRUE(node(1).AddWatch(add).ok());
  Step(model, 3);
  const std::vector<v1::ShowWatchResponse> fresh = Histories(model, 1);
  for (size_t i = 0; i < kWatched.size(); ++i) {
    ASSERT_EQ(fresh[i].records_size(), 1) << kWatched[i];
    EXPECT_EQ(fresh[i].records(0).step(), 3) << kWatched[i];
  }
}

}  // namespace
}  // namespace summon::tests
