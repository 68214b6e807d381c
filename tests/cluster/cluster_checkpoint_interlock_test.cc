// A checkpoint load writes every rank's shards, so on a cluster it takes the
// model like a writable session (R15): refused through every node while a
// trainer on a follower is mid-step, and while that trainer's phases are
// unknown (R24); accepted between steps, with the checkpoint's exact values
// on every rank. The nodes share one --checkpoint-root.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/node_trainer.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

template <typename Topology>
class ClusterCheckpointInterlockTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/checkpoints-",
                         Topology::kNodes, "x", Topology::kLocalRanks);
    std::filesystem::create_directories(root_);
    LocalCluster::Options options;
    options.nodes = Topology::kNodes;
    options.local_ranks = Topology::kLocalRanks;
    options.checkpoint_root = root_;
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    // The trainer of the last node (a follower on every topology).
    trainer_.node = cluster_->nodes() - 1;
    for (int rank = 0; rank < cluster_->world_size(); ++rank) {
      if (cluster_->NodeOf(rank) == trainer_.node)
        trainer_.ranks.push_back(rank);
    }
    trainer_.stub = v1::Trainer::NewStub(grpc::CreateChannel(
        cluster_->address(trainer_.node), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (cluster_ == nullptr) return;
    if (!trainer_.lease.empty()) {
      v1::DetachRequest request;
      request.set_lease_id(trainer_.lease);
      v1::DetachResponse response;
      trainer_.stub->Detach(NodeTrainer::Context().get(), request, &response);
    }
    // An open channel holds a daemon in its shutdown grace.
    trainer_.stub.reset();
    const absl::Status stopped = cluster_->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
    std::filesystem::remove_all(root_);
  }

  // A load of `path` into `model` through every node fails with `code` and
  // a message containing `says`; the model's shards stay `values`.
  void ExpectLoadRefused(const std::string& model, const v1::Model& described,
                         const TensorBytes& values, absl::StatusCode code,
                         const std::string& says) {
    for (int node = 0; node < cluster_->nodes(); ++node) {
      const absl::Status refused =
          cluster_->client(node).LoadModel(model, "src.safetensors").status();
      EXPECT_EQ(refused.code(), code) << "node " << node << ": " << refused;
      EXPECT_TRUE(absl::StrContains(refused.message(), says))
          << "node " << node << ": " << refused;
    }
    EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(0), model)),
              ExpectedChecksums(described, values));
  }

  std::string root_;
  std::unique_ptr<LocalCluster> cluster_;
  NodeTrainer trainer_;
};

TYPED_TEST_SUITE(ClusterCheckpointInterlockTest, ClusterTopologies,
                 ClusterTopologyNames);

TYPED_TEST(ClusterCheckpointInterlockTest, LoadsWaitForStepsAndKnownPhases) {
  const client::SummonClient& leader = this->cluster_->client(0);
  const v1::Model src = CreateSeeded(leader, "src", kUnevenLayout,
                                     v1::SHARDING_STRATEGY_FULL_SHARD);
  ASSERT_TRUE(leader.SaveModel("src", "src.safetensors").ok());
  client::CreateModelParams params;
  params.name = "dst";
  params.layout_json = kUnevenLayout;
  absl::StatusOr<v1::Model> dst = leader.CreateModel(params);  // Zeros.
  ASSERT_TRUE(dst.ok()) << dst.status();
  TensorBytes zeros;
  for (const auto& [fqn, numel] : PrimaryParams(*dst)) {
    zeros[fqn] = std::string(static_cast<size_t>(numel) * 4, '\0');
  }

  NodeTrainer& trainer = this->trainer_;
  v1::AttachResponse attached;
  ASSERT_TRUE(trainer.Attach("dst", "stepper", 30, &attached).ok());
  // Mid-step on the follower: the leader knows, and every node refuses.
  trainer.Walk("dst", {v1::TRAINING_PHASE_FORWARD}, /*step=*/1);
  this->ExpectLoadRefused("dst", *dst, zeros,
                          absl::StatusCode::kFailedPrecondition,
                          "load of a checkpoint");
  trainer.Walk("dst",
               {v1::TRAINING_PHASE_BETWEEN, v1::TRAINING_PHASE_BACKWARD,
                v1::TRAINING_PHASE_OPTIMIZER, v1::TRAINING_PHASE_IDLE},
               /*step=*/1);

  // The trainer stepped where summond could not hear it (R24).
  v1::TrainerHeartbeatRequest heartbeat;
  heartbeat.set_lease_id(trainer.lease);
  heartbeat.set_phases_unknown(true);
  v1::TrainerHeartbeatResponse renewed;
  ASSERT_TRUE(
      trainer.stub->Heartbeat(NodeTrainer::Context().get(), heartbeat, &renewed)
          .ok());
  this->ExpectLoadRefused(
      "dst", *dst, zeros, absl::StatusCode::kUnavailable,
      "the training interlock of model 'dst' is unknown: trainer 'stepper'");

  // Re-established IDLE: the load runs, the checkpoint's values on every
  // rank.
  for (int rank : trainer.ranks) {
    v1::ReportPhaseRequest request;
    request.set_model("dst");
    request.set_rank(rank);
    request.set_phase(v1::TRAINING_PHASE_IDLE);
    request.set_lease_id(trainer.lease);
    request.set_reestablishing(true);
    v1::ReportPhaseResponse response;
    ASSERT_TRUE(
        trainer.stub
            ->ReportPhase(NodeTrainer::Context().get(), request, &response)
            .ok());
  }
  heartbeat.set_phases_unknown(false);
  heartbeat.set_phases_reestablished(true);
  ASSERT_TRUE(
      trainer.stub->Heartbeat(NodeTrainer::Context().get(), heartbeat, &renewed)
          .ok());
  const absl::Status loaded = this->cluster_->client(trainer.node)
                                  .LoadModel("dst", "src.safetensors")
                                  .status();
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(ParamChecksums(ChecksumOk(leader, "dst")),
            ExpectedChecksums(*dst, SeededModel(src)));
}

}  // namespace
}  // namespace summon::tests
