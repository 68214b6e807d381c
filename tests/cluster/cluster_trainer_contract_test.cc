// The trainer contract with trainers attached on every node of a cluster of
// real summond processes (issue 20): each node's trainer attaches and
// reports its own ranks through its own node, maps its shards there and
// watches them there; every generation move (an optimizer step, init
// external, a step cut short by a lapsed lease) and every external-write
// counter agrees on every node, so writebacks between steps are accepted
// through any node and the trainers see the edits in their own shards.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/summon/v1/trainer.grpc.pb.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/node_trainer.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

const std::vector<v1::TrainingPhase>& FullStep() {
  static const auto* const kStep = new std::vector<v1::TrainingPhase>{
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
      v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
      v1::TRAINING_PHASE_IDLE};
  return *kStep;
}

std::vector<float> Negated(std::vector<float> values) {
  for (float& value : values) value = -value;
  return values;
}

template <typename Topology>
class ClusterTrainerContractTest : public SharedClusterTest<Topology> {
 protected:
  void SetUp() override {
    SharedClusterTest<Topology>::SetUp();
    for (int node = 0; node < this->nodes(); ++node) {
      NodeTrainer trainer;
      trainer.node = node;
      for (int rank = 0; rank < this->world(); ++rank) {
        if (this->cluster().NodeOf(rank) == node) trainer.ranks.push_back(rank);
      }
      trainer.stub = v1::Trainer::NewStub(grpc::CreateChannel(
          this->cluster().address(node), grpc::InsecureChannelCredentials()));
      trainers_.push_back(std::move(trainer));
    }
  }

  // Leaves no trainer attached: the cluster's Stop deletes every model
  // without force.
  void TearDown() override {
    for (NodeTrainer& trainer : trainers_) {
      if (trainer.lease.empty()) continue;
      v1::DetachRequest request;
      request.set_lease_id(trainer.lease);
      v1::DetachResponse response;
      trainer.stub->Detach(NodeTrainer::Context().get(), request, &response);
    }
  }

  // Every rank's shards as its own node maps them: state, generation and
  // external-write counter of every unit.
  struct UnitSeen {
    uint64_t generation;
    uint64_t external_writes;
    bool operator==(const UnitSeen& other) const {
      return generation == other.generation &&
             external_writes == other.external_writes;
    }
  };
  void ExpectEveryRankSees(const std::string& model, v1::ModelState state,
                           const std::map<std::string, UnitSeen>& expected) {
    for (const NodeTrainer& trainer : trainers_) {
      for (int rank : trainer.ranks) {
        const v1::MapShardsResponse shard = trainer.Map(model, rank);
        EXPECT_EQ(shard.state(), state)
            << "rank " << rank << " on node " << trainer.node;
        for (const v1::UnitShard& unit : shard.units()) {
          const UnitSeen& want = expected.at(unit.unit());
          EXPECT_EQ(unit.generation(), want.generation)
              << "rank " << rank << " (node " << trainer.node << ") unit '"
              << unit.unit() << "'";
          EXPECT_EQ(unit.external_writes(), want.external_writes)
              << "rank " << rank << " (node " << trainer.node << ") unit '"
              << unit.unit() << "'";
        }
      }
    }
  }
  static std::map<std::string, UnitSeen> Every(uint64_t generation,
                                               uint64_t external_writes = 0) {
    return {{"", {generation, external_writes}},
            {"layers.0", {generation, external_writes}},
            {"layers.1", {generation, external_writes}}};
  }
  // Checks every rank's own slice of `fqn` in its mapped shard against
  // `values` (the whole tensor).
  void ExpectShardsHold(const std::string& model, const std::string& fqn,
                        const std::vector<float>& values) {
    int checked = 0;
    for (const NodeTrainer& trainer : trainers_) {
      ForEachParamShard(
          trainer, model,
          [&](int rank, const v1::ParamShard& param, const float* held) {
            if (param.info().fqn() != fqn) return;
            for (int64_t i = 0; i < param.numel(); ++i) {
              ASSERT_EQ(held[i], values[param.element_offset() + i])
                  << fqn << "[" << param.element_offset() + i << "] on rank "
                  << rank << " (node " << trainer.node << ")";
              ++checked;
            }
          });
    }
    EXPECT_EQ(checked, static_cast<int>(values.size())) << fqn;
  }

  std::vector<NodeTrainer> trainers_;
};

TYPED_TEST_SUITE(ClusterTrainerContractTest, ClusterTopologies,
                 ClusterTopologyNames);

// init external: every node's trainer fills its own ranks' shards, the last
// node's trainer marks the model initialised, and every node leaves
// AWAITING_INIT at the same generation, so a writeback through any node is
// accepted.
TYPED_TEST(ClusterTrainerContractTest, InitExternalReachesEveryNode) {
  client::CreateModelParams params;
  params.name = "init";
  params.layout_json = kUnevenLayout;
  params.init.mutable_external();
  absl::StatusOr<v1::Model> created = this->node(0).CreateModel(params);
  ASSERT_TRUE(created.ok()) << created.status();
  this->ExpectEveryRankSees("init", v1::MODEL_STATE_AWAITING_INIT,
                            this->Every(0));
  for (NodeTrainer& trainer : this->trainers_) {
    v1::AttachResponse attached;
    ASSERT_TRUE(
        trainer
            .Attach("init", absl::StrCat("node-", trainer.node), 30, &attached)
            .ok());
    for (int rank : trainer.ranks) {
      const v1::MapShardsResponse shard = trainer.Map("init", rank);
      MappedShard mapped(shard);
      ASSERT_TRUE(mapped.ok());
      for (const v1::UnitShard& unit : shard.units()) {
        for (const v1::ParamShard& param : unit.params()) {
          const std::vector<float> values =
              SeededFloats(param.info().fqn(), param.info().numel());
          std::memcpy(mapped.Param(unit, param),
                      values.data() + param.element_offset(),
                      param.numel() * sizeof(float));
        }
      }
    }
  }
  NodeTrainer& last = this->trainers_.back();
  v1::MarkInitializedRequest mark;
  mark.set_model("init");
  mark.set_lease_id(last.lease);
  v1::MarkInitializedResponse marked;
  const grpc::Status status =
      last.stub->MarkInitialized(NodeTrainer::Context().get(), mark, &marked);
  ASSERT_TRUE(status.ok()) << status.error_message();
  this->ExpectEveryRankSees("init", v1::MODEL_STATE_READY, this->Every(1));
  // A second mark, through another node, is refused by the leader.
  const grpc::Status again = this->trainers_.front().stub->MarkInitialized(
      NodeTrainer::Context().get(), mark, &marked);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // The trainers' values are the model's, and an edit through the last
  // node is written back on every rank.
  TensorBytes values = SeededModel(*created);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "init")),
            ExpectedChecksums(*created, values));
  const int editor = this->nodes() - 1;
  const std::vector<float> edited = Negated(SeededFloats("layers.1.w", 35));
  const v1::Session session =
      OpenOk(this->node(editor), "init", ModuleScope("layers.1"));
  WriteOk(this->node(editor), session.id(), "layers.1.w", FloatBytes(edited));
  EXPECT_TRUE(CloseOk(this->node(editor), session.id()).written_back());
  values["layers.1.w"] = FloatBytes(edited);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "init")),
            ExpectedChecksums(*created, values));
  this->ExpectShardsHold("init", "layers.1.w", edited);
  std::map<std::string, typename TestFixture::UnitSeen> expected =
      this->Every(1);
  expected["layers.1"] = {2, 1};
  this->ExpectEveryRankSees("init", v1::MODEL_STATE_READY, expected);
}

// Trainers on every node step; an inspector edits between steps through
// node 0; every trainer sees the edit in its own shards and in WatchUnits on
// its own node; a step moves every generation on every node and no
// external-write counter (R18).
TYPED_TEST(ClusterTrainerContractTest, TrainersOnEveryNodeSeeAnEdit) {
  const v1::Model model = CreateSeeded(this->node(0), "watched", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  TensorBytes values = SeededModel(model);
  for (NodeTrainer& trainer : this->trainers_) {
    v1::AttachResponse attached;
    ASSERT_TRUE(trainer
                    .Attach("watched", absl::StrCat("node-", trainer.node), 30,
                            &attached)
                    .ok());
    trainer.Walk("watched", FullStep(), /*step=*/1);
  }
  this->ExpectEveryRankSees("watched", v1::MODEL_STATE_READY, this->Every(1));

  // Each node's trainer watches its own node.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchUnitsResponse>>>
      watches;
  for (NodeTrainer& trainer : this->trainers_) {
    v1::WatchUnitsRequest request;
    request.set_model("watched");
    contexts.push_back(NodeTrainer::Context(absl::Seconds(30)));
    watches.push_back(trainer.stub->WatchUnits(contexts.back().get(), request));
    v1::WatchUnitsResponse first;
    ASSERT_TRUE(watches.back()->Read(&first)) << "node " << trainer.node;
    for (const v1::UnitGeneration& unit : first.units()) {
      EXPECT_EQ(unit.generation(), 1u) << "node " << trainer.node;
      EXPECT_EQ(unit.external_writes(), 0u) << "node " << trainer.node;
    }
  }
  const std::vector<float> edited =
      Negated(SeededFloats("layers.0.attn.w", 25));
  const v1::Session editor =
      OpenOk(this->node(0), "watched", ParamScope({"layers.0.attn.w"}));
  WriteOk(this->node(0), editor.id(), "layers.0.attn.w", FloatBytes(edited));
  EXPECT_TRUE(CloseOk(this->node(0), editor.id()).written_back());
  values["layers.0.attn.w"] = FloatBytes(edited);
  for (size_t n = 0; n < watches.size(); ++n) {
    v1::WatchUnitsResponse next;
    ASSERT_TRUE(watches[n]->Read(&next)) << "node " << n;
    for (const v1::UnitGeneration& unit : next.units()) {
      const bool moved = unit.unit() == "layers.0";
      EXPECT_EQ(unit.external_writes(), moved ? 1u : 0u)
          << "node " << n << " unit '" << unit.unit() << "'";
      EXPECT_EQ(unit.generation(), moved ? 2u : 1u)
          << "node " << n << " unit '" << unit.unit() << "'";
    }
    contexts[n]->TryCancel();
    watches[n]->Finish();
  }
  this->ExpectShardsHold("watched", "layers.0.attn.w", edited);

  // The next step moves every generation on every node; the counters stay.
  for (const NodeTrainer& trainer : this->trainers_) {
    trainer.Walk("watched", FullStep(), /*step=*/2);
  }
  std::map<std::string, typename TestFixture::UnitSeen> expected =
      this->Every(2);
  expected["layers.0"] = {3, 1};
  this->ExpectEveryRankSees("watched", v1::MODEL_STATE_READY, expected);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "watched")),
            ExpectedChecksums(model, values));
}

// A trainer on the last node stops heartbeating in OPTIMIZER: its lease
// lapses, its ranks return to IDLE and every unit moves on every node (the
// step may have half-changed its shards), so a writeback through any node
// is accepted afterwards; the next incarnation takes the ranks over.
TYPED_TEST(ClusterTrainerContractTest,
           LeaseLapsingInOptimizerReachesEveryNode) {
  const v1::Model model = CreateSeeded(this->node(0), "lapse", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  TensorBytes values = SeededModel(model);
  NodeTrainer& last = this->trainers_.back();
  v1::AttachResponse attached;
  ASSERT_TRUE(last.Attach("lapse", "doomed", 1, &attached).ok());
  last.Walk("lapse",
            {v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
             v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER},
            /*step=*/1);
  this->ExpectEveryRankSees("lapse", v1::MODEL_STATE_READY, this->Every(1));
  // No heartbeat: within the lease (1 s) and the reaper's interval the
  // ranks are IDLE again, as every node says.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool idle = false;
  while (!idle && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<v1::Model> described =
        this->node(last.node).DescribeModel("lapse");
    ASSERT_TRUE(described.ok()) << described.status();
    idle = true;
    for (const v1::RankState& rank : described->ranks()) {
      idle = idle && rank.phase() == v1::TRAINING_PHASE_IDLE;
    }
  }
  ASSERT_TRUE(idle) << "the lapsed lease's ranks never returned to IDLE";
  this->ExpectEveryRankSees("lapse", v1::MODEL_STATE_READY, this->Every(2));
  const grpc::Status late =
      last.Report("lapse", last.ranks.front(), v1::TRAINING_PHASE_IDLE, 1);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(late.error_message().find("lapsed"), std::string::npos)
      << late.error_message();

  const std::vector<float> edited = Negated(SeededFloats("norm.w", 6));
  const v1::Session session =
      OpenOk(this->node(last.node), "lapse", ParamScope({"norm.w"}));
  WriteOk(this->node(last.node), session.id(), "norm.w", FloatBytes(edited));
  EXPECT_TRUE(CloseOk(this->node(last.node), session.id()).written_back());
  values["norm.w"] = FloatBytes(edited);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "lapse")),
            ExpectedChecksums(model, values));
  this->ExpectShardsHold("lapse", "norm.w", edited);

  // The restarted trainer attaches through its node and hears whom it
  // replaces.
  ASSERT_TRUE(last.Attach("lapse", "reborn", 30, &attached).ok());
  EXPECT_EQ(attached.previous_incarnation(), "doomed");
  last.Walk("lapse", FullStep(), /*step=*/2);
  std::map<std::string, typename TestFixture::UnitSeen> expected =
      this->Every(3);
  expected[""] = {4, 1};
  this->ExpectEveryRankSees("lapse", v1::MODEL_STATE_READY, expected);
}

// R24: a trainer on the last node says it moved its ranks while summond could
// not hear it. Until it re-establishes them, sessions are refused through
// every node (UNAVAILABLE naming it); a re-assertion of the phase its ranks
// are in is accepted only while re-establishing; then sessions open again.
TYPED_TEST(ClusterTrainerContractTest, SessionsWaitForPhasesToBeReestablished) {
  CreateSeeded(this->node(0), "blind", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  NodeTrainer& last = this->trainers_.back();
  v1::AttachResponse attached;
  ASSERT_TRUE(last.Attach("blind", "blind", 30, &attached).ok());
  EXPECT_FALSE(attached.phases_unknown());
  last.Walk("blind", {v1::TRAINING_PHASE_FORWARD}, /*step=*/1);
  v1::TrainerHeartbeatRequest heartbeat;
  heartbeat.set_lease_id(last.lease);
  heartbeat.set_phases_unknown(true);
  v1::TrainerHeartbeatResponse renewed;
  ASSERT_TRUE(
      last.stub->Heartbeat(NodeTrainer::Context().get(), heartbeat, &renewed)
          .ok());
  EXPECT_TRUE(renewed.phases_unknown());
  for (int node = 0; node < this->nodes(); ++node) {
    absl::StatusOr<v1::Session> refused =
        this->node(node).OpenSession("blind", ReadOnly());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
        << "node " << node << ": " << refused.status();
    EXPECT_NE(refused.status().message().find(
                  "the training interlock of model 'blind' is unknown: "
                  "trainer 'blind'"),
              std::string::npos)
        << refused.status();
  }
  // FORWARD again is an illegal move (R16), but a re-assertion while
  // re-establishing (nothing moves); the walk leaves the interlock unknown.
  EXPECT_EQ(
      last.Report("blind", last.ranks.front(), v1::TRAINING_PHASE_FORWARD, 1)
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);
  for (int rank : last.ranks) {
    v1::ReportPhaseRequest request;
    request.set_model("blind");
    request.set_rank(rank);
    request.set_phase(v1::TRAINING_PHASE_FORWARD);
    request.set_lease_id(last.lease);
    request.set_reestablishing(true);
    v1::ReportPhaseResponse response;
    const grpc::Status status = last.stub->ReportPhase(
        NodeTrainer::Context().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.previous_phase(), v1::TRAINING_PHASE_FORWARD);
  }
  EXPECT_EQ(this->node(0).OpenSession("blind", ReadOnly()).status().code(),
            absl::StatusCode::kUnavailable);
  heartbeat.set_phases_unknown(false);
  heartbeat.set_phases_reestablished(true);
  ASSERT_TRUE(
      last.stub->Heartbeat(NodeTrainer::Context().get(), heartbeat, &renewed)
          .ok());
  EXPECT_FALSE(renewed.phases_unknown());
  // Known again: the ranks are mid-step, so R1 refuses; after the step the
  // session opens.
  EXPECT_EQ(this->node(0).OpenSession("blind", ReadOnly()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  last.Walk("blind",
            {v1::TRAINING_PHASE_BETWEEN, v1::TRAINING_PHASE_BACKWARD,
             v1::TRAINING_PHASE_OPTIMIZER, v1::TRAINING_PHASE_IDLE},
            /*step=*/1);
  const v1::Session session =
      OpenOk(this->node(last.node), "blind", ReadOnly());
  EXPECT_EQ(ReadOk(this->node(last.node), session.id(), "norm.w"),
            FloatBytes(SeededFloats("norm.w", 6)));
  CloseOk(this->node(last.node), session.id());
}

// R15 on a cluster: a delete is refused while a rank on the last node is
// mid-step (its trainer reports through its own node), without force while
// the trainer is attached, and with force once the step is over; the
// trainer's next call then says why its lease ended.
TYPED_TEST(ClusterTrainerContractTest, DeleteWaitsForAStepOnAnyNode) {
  CreateSeeded(this->node(0), "doomed", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  NodeTrainer& last = this->trainers_.back();
  v1::AttachResponse attached;
  ASSERT_TRUE(last.Attach("doomed", "stepper", 30, &attached).ok());
  last.Walk("doomed", {v1::TRAINING_PHASE_FORWARD}, /*step=*/1);
  absl::Status mid_step =
      this->node(0).DeleteModel("doomed", /*force=*/true).status();
  EXPECT_EQ(mid_step.code(), absl::StatusCode::kFailedPrecondition) << mid_step;
  EXPECT_NE(mid_step.message().find("FORWARD"), std::string::npos) << mid_step;
  last.Walk("doomed", {v1::TRAINING_PHASE_IDLE}, /*step=*/1);
  absl::Status attached_trainer =
      this->node(0).DeleteModel("doomed", /*force=*/false).status();
  EXPECT_EQ(attached_trainer.code(), absl::StatusCode::kFailedPrecondition)
      << attached_trainer;
  EXPECT_NE(attached_trainer.message().find("trainer 'stepper' attached"),
            std::string::npos)
      << attached_trainer;
  ASSERT_TRUE(this->node(last.node).DeleteModel("doomed", true).ok());
  const grpc::Status late =
      last.Report("doomed", last.ranks.front(), v1::TRAINING_PHASE_FORWARD, 2);
  EXPECT_NE(late.error_code(), grpc::StatusCode::OK);
  last.lease.clear();  // Nothing to detach.
  for (const NodeTrainer& trainer : this->trainers_) {
    v1::MapShardsRequest request;
    request.set_model("doomed");
    request.set_rank(trainer.ranks.front());
    v1::MapShardsResponse response;
    EXPECT_EQ(trainer.stub
                  ->MapShards(NodeTrainer::Context().get(), request, &response)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND)
        << "node " << trainer.node;
  }
}

}  // namespace
}  // namespace summon::tests
