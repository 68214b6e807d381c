// The trainer contract on clusters of real summond processes (issue 20):
// phases reported for every rank through its own node, an optimizer step's
// generation reaching every node before the trainer hears back (R7, R23),
// a writeback between steps accepted with exact values on every rank, and a
// writeback across a step refused by R7.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;
using ::summon::client::SummonClient;

template <typename Topology>
class ClusterTrainerTest : public SharedClusterTest<Topology> {
 public:
  int NodeOf(int rank) const { return this->cluster().NodeOf(rank); }

  // Walks `phases` for `rank` through the rank's own node.
  void Walk(int rank, const std::vector<v1::TrainingPhase>& phases,
            int64_t step) const {
    for (v1::TrainingPhase phase : phases) {
      absl::StatusOr<v1::ReportPhaseResponse> reported =
          this->node(NodeOf(rank)).ReportPhase("train", rank, phase, step);
      ASSERT_TRUE(reported.ok())
          << "rank " << rank << " " << v1::TrainingPhase_Name(phase) << ": "
          << reported.status();
    }
  }
  // Every unit's generation as rank `rank`'s own node maps its shards.
  std::map<std::string, uint64_t> Generations(int rank) const {
    std::map<std::string, uint64_t> generations;
    absl::StatusOr<v1::MapShardsResponse> mapped =
        this->node(NodeOf(rank)).MapShards("train", rank);
    EXPECT_TRUE(mapped.ok()) << mapped.status();
    if (!mapped.ok()) return generations;
    for (const v1::UnitShard& unit : mapped->units()) {
      generations[unit.unit()] = unit.generation();
    }
    return generations;
  }
  // Every rank, on its own node, maps `expected` for every unit.
  void ExpectGenerationsEverywhere(uint64_t expected) const {
    for (int rank = 0; rank < this->world(); ++rank) {
      for (const auto& [unit, generation] : Generations(rank)) {
        EXPECT_EQ(generation, expected)
            << "rank " << rank << " (node " << NodeOf(rank) << ") unit '"
            << unit << "'";
      }
    }
  }
};

TYPED_TEST_SUITE(ClusterTrainerTest, ClusterTopologies, ClusterTopologyNames);

const std::vector<v1::TrainingPhase>& FullStep() {
  static const auto* const kSteps = new std::vector<v1::TrainingPhase>{
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
      v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
      v1::TRAINING_PHASE_IDLE};
  return *kSteps;
}

std::vector<float> Negated(std::vector<float> values) {
  for (float& value : values) value = -value;
  return values;
}

TYPED_TEST(ClusterTrainerTest, WritebacksBetweenStepsAndAcrossOne) {
  const v1::Model model = CreateSeeded(this->node(0), "train", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  TensorBytes values = SeededModel(model);
  // Step 1 on every rank, each through its own node: one optimizer step
  // moves every unit's generation once, on every node alike.
  for (int rank = 0; rank < this->world(); ++rank) {
    this->Walk(rank, FullStep(), /*step=*/1);
  }
  this->ExpectGenerationsEverywhere(1);

  // Between steps an inspector on node 0 edits layers.1: accepted (the
  // followers' PREPARE compares against the generation the leader set).
  const std::vector<float> edited = Negated(SeededFloats("layers.1.w", 7 * 5));
  const v1::Session editor =
      OpenOk(this->node(0), "train", ModuleScope("layers.1"));
  WriteOk(this->node(0), editor.id(), "layers.1.w", FloatBytes(edited));
  const v1::CloseSessionResponse closed = CloseOk(this->node(0), editor.id());
  EXPECT_TRUE(closed.written_back());
  values["layers.1.w"] = FloatBytes(edited);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "train")),
            ExpectedChecksums(model, values));
  for (int rank = 0; rank < this->world(); ++rank) {
    const std::map<std::string, uint64_t> generations = this->Generations(rank);
    EXPECT_EQ(generations.at("layers.1"), 2u) << "rank " << rank;
    EXPECT_EQ(generations.at("layers.0"), 1u) << "rank " << rank;
  }

  // norm.w lives on the last rank only: rank 0 is mid-step while a writer
  // holds it, and rank 0's optimizer step moves it under the writer (R7).
  this->Walk(0,
             {v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
              v1::TRAINING_PHASE_BACKWARD},
             /*step=*/2);
  const v1::Session stale =
      OpenOk(this->node(0), "train", ParamScope({"norm.w"}));
  WriteOk(this->node(0), stale.id(), "norm.w",
          FloatBytes(Negated(SeededFloats("norm.w", 6))));
  this->Walk(0, {v1::TRAINING_PHASE_OPTIMIZER, v1::TRAINING_PHASE_IDLE},
             /*step=*/2);
  absl::StatusOr<v1::CloseSessionResponse> refused =
      this->node(0).CloseSession(stale.id());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted)
      << refused.status();
  EXPECT_NE(refused.status().message().find(
                "unit '' of model 'train' moved from generation 1 to 2"),
            std::string::npos)
      << refused.status();
  ASSERT_TRUE(this->node(0).CloseSession(stale.id(), /*abort=*/true).ok());
  // Nothing of the refused writeback reached any rank.
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "train")),
            ExpectedChecksums(model, values));
  for (int rank = 0; rank < this->world(); ++rank) {
    const std::map<std::string, uint64_t> generations = this->Generations(rank);
    EXPECT_EQ(generations, this->Generations(0)) << "rank " << rank;
    EXPECT_EQ(generations.at("layers.1"), 3u) << "rank " << rank;
    EXPECT_EQ(generations.at("layers.0"), 2u) << "rank " << rank;
  }

  // After the step, a writeback of the same unit through a follower is
  // accepted on every node.
  const v1::Session fresh =
      OpenOk(this->node(1), "train", ParamScope({"norm.w"}));
  WriteOk(this->node(1), fresh.id(), "norm.w",
          FloatBytes(Negated(SeededFloats("norm.w", 6))));
  EXPECT_TRUE(CloseOk(this->node(1), fresh.id()).written_back());
  values["norm.w"] = FloatBytes(Negated(SeededFloats("norm.w", 6)));
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "train")),
            ExpectedChecksums(model, values));
}

}  // namespace
}  // namespace summon::tests
