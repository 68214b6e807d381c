// SaveCheckpoint split across a cluster, simulated in one process: every
// "node" plans, the leader creates, each node writes the ranges of its own
// ranks only, and the leader commits or abandons.

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint/checkpoint.h"
#include "server/testing/checkpoint_test_model.h"

namespace summon::server {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

const std::string kPartial(kCheckpointPartialSuffix);
const std::map<std::string, std::string> kMetadata = {{"step", "3"}};
constexpr int64_t kMaxFileBytes = 100;  // Five files in the directory form.

// Every field of a plan, so that the plans of two nodes can be compared.
std::string Describe(const CheckpointFiles& plan) {
  std::string text = absl::StrCat(plan.directory, " ", plan.tensor_bytes, "\n");
  auto describe_file = [&text](const PlannedCheckpointFile& file) {
    absl::StrAppend(&text, file.path, " ", file.temp_path, " ", file.size, " ",
                    file.head, "\n");
  };
  for (const PlannedCheckpointFile& file : plan.files) describe_file(file);
  if (plan.index.has_value()) describe_file(*plan.index);
  for (const PlannedCheckpointTensor& tensor : plan.tensors) {
    absl::StrAppend(&text, tensor.location.unit, ".", tensor.location.param,
                    " in ", tensor.file, " at ", tensor.data_offset, "\n");
  }
  return text;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int64_t Sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

struct ClusterCase {
  std::string name;
  core::Strategy strategy;
  core::Topology topology;  // Node n hosts ranks n*L .. n*L+L-1.
  bool use_orig_params;
};

void PrintTo(const ClusterCase& cluster, std::ostream* out) {
  *out << cluster.name;
}

// The cluster and whether the checkpoint is a directory (else one file).
class ClusterSaveTest
    : public testing::TestWithParam<std::tuple<ClusterCase, bool>> {
 protected:
  ClusterSaveTest()
      : model_(NodeModel()), source_(model_), dir_(MakeTempDir()) {
    source_.FillOwnedSlices(AllRanks(model_), kSeed);
  }

  const ClusterCase& Cluster() const { return std::get<0>(GetParam()); }
  bool DirectoryForm() const { return std::get<1>(GetParam()); }
  std::string Path() const {
    return DirectoryForm() ? dir_ + "/out" : dir_ + "/model.safetensors";
  }
  // Where the files go.
  std::string FilesDir() const { return DirectoryForm() ? Path() : dir_; }

  // Each node parses the layout itself.
  core::ModelSpec NodeModel() const {
    return Model(Cluster().strategy, Cluster().topology,
                 Cluster().use_orig_params);
  }

  std::vector<int> LocalRanks(int node) const {
    std::vector<int> ranks;
    const int local = Cluster().topology.local_ranks;
    for (int r = node * local; r < (node + 1) * local; ++r) ranks.push_back(r);
    return ranks;
  }

  // Plans on every node, expecting them all to agree; the leader's plan.
  CheckpointFiles PlanOnEveryNode() const {
    std::vector<CheckpointFiles> plans;
    for (int node = 0; node < Cluster().topology.nodes; ++node) {
      absl::StatusOr<CheckpointFiles> plan =
          PlanCheckpoint(Path(), NodeModel(), kMetadata, kMaxFileBytes);
      EXPECT_TRUE(plan.ok()) << plan.status();
      plans.push_back(plan.value_or(CheckpointFiles()));
      EXPECT_EQ(Describe(plans.back()), Describe(plans.front()))
          << "node " << node;
    }
    return plans.front();
  }

  // The tensor bytes each of `nodes` writes from its local ranks.
  std::vector<int64_t> WriteOnNodes(const CheckpointFiles& plan,
                                    const std::vector<int>& nodes) {
    std::vector<int64_t> bytes;
    for (int node : nodes) {
      absl::StatusOr<int64_t> written = WriteCheckpointRanges(
          plan, model_, LocalRanks(node), source_.Address());
      EXPECT_TRUE(written.ok()) << "node " << node << ": " << written.status();
      bytes.push_back(written.value_or(-1));
    }
    return bytes;
  }

  core::ModelSpec model_;
  Shards source_;
  std::string dir_;
};

TEST_P(ClusterSaveTest, NodesWriteTheirOwnRangesAndTheLeaderCommits) {
  const CheckpointFiles plan = PlanOnEveryNode();
  EXPECT_EQ(plan.tensor_bytes, kTensorBytes);
  ASSERT_TRUE(CreateCheckpointFiles(plan).ok());
  std::vector<int> nodes(Cluster().topology.nodes);
  std::iota(nodes.begin(), nodes.end(), 0);
  const std::vector<int64_t> bytes = WriteOnNodes(plan, nodes);
  // Each tensor byte exactly once: the load below finds every byte.
  EXPECT_EQ(Sum(bytes), kTensorBytes);
  if (model_.groups.group_size == model_.groups.topology.world_size()) {
    EXPECT_THAT(bytes, Each(Gt(0)));  // Every node writes its shards.
  } else {
    // Replicated: the lowest replica of every position is on node 0.
    EXPECT_EQ(bytes.front(), kTensorBytes);
    EXPECT_THAT(std::vector<int64_t>(bytes.begin() + 1, bytes.end()), Each(0));
  }
  EXPECT_THAT(FilesIn(FilesDir()), Each(EndsWith(kPartial)));

  absl::StatusOr<SavedCheckpoint> saved = CommitCheckpointFiles(plan);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_THAT(FilesIn(FilesDir()),
              SizeIs(plan.files.size() + (DirectoryForm() ? 1 : 0)));
  EXPECT_THAT(FilesIn(FilesDir()), Each(Not(EndsWith(kPartial))));
  Shards loaded(model_);
  absl::StatusOr<int64_t> bytes_read =
      LoadCheckpoint(Path(), model_, AllRanks(model_), loaded.Address());
  ASSERT_TRUE(bytes_read.ok()) << bytes_read.status();
  EXPECT_EQ(*bytes_read, kTensorBytes);
  ExpectSameShards(model_, loaded, source_, AllRanks(model_));

  // The very files one process saving every rank writes.
  absl::StatusOr<SavedCheckpoint> alone = SaveCheckpoint(
      DirectoryForm() ? dir_ + "/alone" : dir_ + "/alone.safetensors", model_,
      AllRanks(model_), source_.Address(), kMetadata, kMaxFileBytes);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->files.size(), saved->files.size());
  for (size_t f = 0; f < saved->files.size(); ++f) {
    EXPECT_EQ(Contents(saved->files[f]), Contents(alone->files[f]))
        << saved->files[f];
  }
  EXPECT_EQ(saved->bytes_written, alone->bytes_written);
}

TEST_P(ClusterSaveTest, AMissingNodeLeavesBytesUnwrittenAndAbandonCleansUp) {
  const CheckpointFiles plan = PlanOnEveryNode();
  ASSERT_TRUE(CreateCheckpointFiles(plan).ok());
  std::vector<int> nodes(Cluster().topology.nodes - 1);
  std::iota(nodes.begin(), nodes.end(), 1);  // Node 0 never writes.
  EXPECT_LT(Sum(WriteOnNodes(plan, nodes)), plan.tensor_bytes);
  EXPECT_THAT(FilesIn(FilesDir()), SizeIs(plan.files.size()));

  AbandonCheckpointFiles(plan);
  EXPECT_THAT(FilesIn(FilesDir()), IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(
    Clusters, ClusterSaveTest,
    testing::Combine(
        testing::Values(
            ClusterCase{
                "FullShard2x2", core::Strategy::kFullShard, {2, 2}, true},
            ClusterCase{
                "FullShard3x2Flat", core::Strategy::kFullShard, {3, 2}, false},
            ClusterCase{"NoShard2x2", core::Strategy::kNoShard, {2, 2}, true},
            ClusterCase{
                "HybridShard2x2", core::Strategy::kHybridShard, {2, 2}, true},
            ClusterCase{
                "HybridShard3x2", core::Strategy::kHybridShard, {3, 2}, true}),
        testing::Bool()),
    [](const testing::TestParamInfo<std::tuple<ClusterCase, bool>>& info) {
      return absl::StrCat(std::get<0>(info.param).name,
                          std::get<1>(info.param) ? "Directory" : "File");
    });

TEST(WriteCheckpointRangesTest, TheLowestReplicaWritesItsPosition) {
  const core::ModelSpec model = Model(core::Strategy::kHybridShard, {2, 2});
  Shards shards(model);
  shards.FillOwnedSlices({0, 1}, kSeed);
  shards.FillOwnedSlices({2, 3}, kSeed + 1);  // Must never reach the file.
  const std::string path = MakeTempDir() + "/m.safetensors";
  absl::StatusOr<CheckpointFiles> plan = PlanCheckpoint(path, model, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(CreateCheckpointFiles(*plan).ok());
  EXPECT_EQ(*WriteCheckpointRanges(*plan, model, {3, 2}, shards.Address()), 0);
  EXPECT_EQ(*WriteCheckpointRanges(*plan, model, {1, 0}, shards.Address()),
            kTensorBytes);
  ASSERT_TRUE(CommitCheckpointFiles(*plan).ok());
  Shards loaded(model);
  ASSERT_TRUE(LoadCheckpoint(path, model, {0, 1}, loaded.Address()).ok());
  ExpectSameShards(model, loaded, shards, {0, 1});
}

TEST(WriteCheckpointRangesTest, RefusesFilesItCannotUse) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {2, 1});
  Shards shards(model);
  const std::string path = MakeTempDir() + "/m.safetensors";
  absl::StatusOr<CheckpointFiles> plan =
      PlanCheckpoint(path, model, {{"step", "1"}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(WriteCheckpointRanges(*plan, model, {0}, shards.Address())
                .status()
                .code(),
            absl::StatusCode::kNotFound);  // The leader has not created it yet.

  ASSERT_TRUE(CreateCheckpointFiles(*plan).ok());
  EXPECT_EQ(WriteCheckpointRanges(*plan, model, {2}, shards.Address())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // Outside the world.
  // A node that planned other metadata: same size, another header.
  absl::StatusOr<CheckpointFiles> other =
      PlanCheckpoint(path, model, {{"step", "2"}});
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->files[0].size, plan->files[0].size);
  absl::StatusOr<int64_t> written =
      WriteCheckpointRanges(*other, model, {0}, shards.Address());
  EXPECT_EQ(written.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(written.status().message(),
              HasSubstr("does not start with the header this node planned"));
  AbandonCheckpointFiles(*plan);
}

TEST(PlanCheckpointTest, PlacesEveryTensorWithoutTouchingTheDisk) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 2});
  const std::string dir = MakeTempDir();
  absl::StatusOr<CheckpointFiles> plan =
      PlanCheckpoint(dir + "/out", model, {}, kMaxFileBytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(FilesIn(dir), IsEmpty());
  EXPECT_EQ(plan->directory, dir + "/out");
  ASSERT_THAT(plan->files, SizeIs(5));
  EXPECT_EQ(plan->files[3].path, dir + "/out/model-00004-of-00005.safetensors");
  EXPECT_EQ(plan->files[3].temp_path,
            dir + "/out/model-00004-of-00005.safetensors.summon-partial");
  ASSERT_TRUE(plan->index.has_value());
  EXPECT_EQ(plan->index->temp_path,
            dir + "/out/model.safetensors.index.json.summon-partial");
  EXPECT_EQ(plan->index->size, static_cast<int64_t>(plan->index->head.size()));
  // Tensor bytes per file: 160 | 12 | 100 | 20+42+2 | 48.
  std::vector<int> files;
  for (const PlannedCheckpointTensor& tensor : plan->tensors) {
    files.push_back(tensor.file);
  }
  EXPECT_THAT(files, ElementsAre(0, 1, 2, 3, 3, 3, 4));
  const int64_t data_start = static_cast<int64_t>(plan->files[3].head.size());
  EXPECT_EQ(plan->tensors[3].data_offset, data_start);
  EXPECT_EQ(plan->tensors[4].data_offset, data_start + 20);
  EXPECT_EQ(plan->tensors[5].data_offset, data_start + 20 + 42);
  EXPECT_EQ(plan->files[3].size, data_start + 64);

  EXPECT_EQ(PlanCheckpoint(dir + "/out", model, {}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::server
