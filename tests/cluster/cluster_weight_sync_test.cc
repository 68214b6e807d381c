// Weight sync across real summond processes (one node of 2 ranks, 2 nodes x
// 2 ranks, 3 nodes x 1 rank over Gloo): a version published through any
// node reads back exactly (seeded init: every element's value is known)
// through every node, a box moves between nodes only the elements owned
// there (ReadSlicesStats.peer_bytes, counted here from the layout, not
// asked of summond), a version never changes after a writeback, a publish
// never mixes steps, and bad entries are refused naming them.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/node_trainer.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

// FSDP2: w and b chunked by rows, c by columns (Shard(1)).
constexpr char kLayout[] = R"({"kind": "fsdp2", "strategy": "FULL_SHARD",
  "units": [
    {"fqn": "", "params": [{"fqn": "b", "shape": [16], "dtype": "float32"}]},
    {"fqn": "l0", "params": [
      {"fqn": "l0.w", "shape": [16, 8], "dtype": "float32"},
      {"fqn": "l0.c", "shape": [4, 12], "dtype": "float32",
       "shard_dim": 1}]}]})";

struct OneNodeTwoRanks {
  static constexpr int kNodes = 1;
  static constexpr int kLocalRanks = 2;
};
using Topologies =
    testing::Types<OneNodeTwoRanks, TwoNodesTwoRanks, ThreeNodesOneRank>;

// What an optimizer step does in place: every value of every shard of
// `model` that `trainer`'s ranks hold, negated.
void NegateEveryShard(const NodeTrainer& trainer, const std::string& model) {
  ForEachParamShard(trainer, model,
                    [](int, const v1::ParamShard& param, float* held) {
                      for (int64_t i = 0; i < param.numel(); ++i) {
                        held[i] = -held[i];
                      }
                    });
}

// Step `step` of every trainer, whose optimizer negates every value of
// its ranks' shards between its OPTIMIZER and IDLE reports.
void StepNegating(const std::vector<NodeTrainer>& trainers,
                  const std::string& model, int64_t step) {
  for (const NodeTrainer& trainer : trainers) {
    trainer.Walk(model,
                 {v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
                  v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER},
                 step);
    NegateEveryShard(trainer, model);
    trainer.Walk(model, {v1::TRAINING_PHASE_IDLE}, step);
  }
}

struct Box {
  std::string fqn;
  std::vector<int64_t> shape;
  int shard_dim;
  std::vector<std::pair<int64_t, int64_t>> box;
};

v1::ReadSlicesRequest Request(const std::string& model, int64_t version,
                              const std::vector<Box>& boxes,
                              v1::DType dtype = v1::DTYPE_UNSPECIFIED) {
  v1::ReadSlicesRequest request;
  request.set_model(model);
  request.set_version(version);
  for (const Box& box : boxes) {
    v1::SliceEntry* entry = request.add_entries();
    entry->set_fqn(box.fqn);
    entry->set_dtype(dtype);
    for (const auto& [start, length] : box.box) {
      v1::SliceRange* range = entry->add_box();
      range->set_start(start);
      range->set_length(length);
    }
  }
  return request;
}

// The box of `values` (the whole tensor, row-major), and the bytes of it
// owned by ranks off `reader` (torch.chunk on the shard dim: chunks of
// ceil(size / W) rows or columns).
std::vector<float> Cut(const Box& box, const std::vector<float>& values,
                       int world, int local_ranks, int reader,
                       int64_t* remote_bytes) {
  std::vector<float> out;
  const int64_t rows = box.shape[0];
  const int64_t cols = box.shape.size() > 1 ? box.shape[1] : 1;
  const int64_t chunk = (box.shape[box.shard_dim] + world - 1) / world;
  const auto [r0, rn] = box.box[0];
  const auto [c0, cn] =
      box.box.size() > 1 ? box.box[1] : std::pair<int64_t, int64_t>{0, 1};
  for (int64_t r = r0; r < r0 + rn && r < rows; ++r) {
    for (int64_t c = c0; c < c0 + cn; ++c) {
      out.push_back(values[r * cols + c]);
      const int owner = static_cast<int>((box.shard_dim == 0 ? r : c) / chunk);
      if (owner / local_ranks != reader) *remote_bytes += 4;
    }
  }
  return out;
}

std::vector<float> Floats(const client::SlicesData& data, int entry) {
  const v1::SliceLayout& layout = data.entries[entry];
  return BytesToFloats(data.packed.substr(layout.offset(), layout.bytes()));
}

template <typename Topology>
class ClusterWeightSyncTest : public SharedClusterTest<Topology> {
 protected:
  std::vector<Box> Boxes() const {
    return {{"l0.w", {16, 8}, 0, {{5, 6}, {0, 8}}},   // rows
            {"l0.w", {16, 8}, 0, {{0, 16}, {3, 2}}},  // columns
            {"l0.c", {4, 12}, 1, {{1, 2}, {2, 7}}},
            {"b", {16}, 0, {{0, 16}}}};
  }

  // Every box through every node equals the cut of `values`; peer bytes
  // are exactly the elements owned off the reader's node.
  void ExpectVersion(const std::string& model, int64_t version,
                     const TensorBytes& values) {
    const std::vector<Box> boxes = Boxes();
    for (int reader = 0; reader < this->nodes(); ++reader) {
      SCOPED_TRACE(absl::StrCat("read via node ", reader));
      absl::StatusOr<client::SlicesData> read =
          this->node(reader).ReadSlices(Request(model, version, boxes));
      ASSERT_TRUE(read.ok()) << read.status();
      ASSERT_EQ(read->entries.size(), boxes.size());
      int64_t remote = 0;
      int64_t slice_bytes = 0;
      for (size_t i = 0; i < boxes.size(); ++i) {
        EXPECT_EQ(read->entries[i].offset() % 16, 0);
        const std::vector<float> expected =
            Cut(boxes[i], BytesToFloats(values.at(boxes[i].fqn)), this->world(),
                Topology::kLocalRanks, reader, &remote);
        EXPECT_EQ(Floats(*read, static_cast<int>(i)), expected)
            << boxes[i].fqn << " entry " << i;
        slice_bytes += static_cast<int64_t>(expected.size()) * 4;
      }
      EXPECT_EQ(read->stats.slice_bytes(), slice_bytes);
      EXPECT_EQ(read->stats.peer_bytes(), remote);
      if (this->nodes() > 1) {
        EXPECT_GT(remote, 0);
      }
    }
  }

  // One trainer per node over its node's ranks, attached to `model`.
  std::vector<NodeTrainer> AttachTrainers(const std::string& model) {
    std::vector<NodeTrainer> trainers(this->nodes());
    for (int node = 0; node < this->nodes(); ++node) {
      trainers[node].node = node;
      for (int rank = 0; rank < this->world(); ++rank) {
        if (this->cluster().NodeOf(rank) == node) {
          trainers[node].ranks.push_back(rank);
        }
      }
      trainers[node].stub = v1::Trainer::NewStub(grpc::CreateChannel(
          this->cluster().address(node), grpc::InsecureChannelCredentials()));
      v1::AttachResponse attached;
      EXPECT_TRUE(trainers[node]
                      .Attach(model, absl::StrCat("t", node), 30, &attached)
                      .ok());
    }
    return trainers;
  }

  static void Detach(std::vector<NodeTrainer>& trainers) {
    for (NodeTrainer& trainer : trainers) {
      v1::DetachRequest request;
      request.set_lease_id(trainer.lease);
      v1::DetachResponse response;
      trainer.stub->Detach(NodeTrainer::Context().get(), request, &response);
      trainer.stub.reset();
    }
  }
};

TYPED_TEST_SUITE(ClusterWeightSyncTest, Topologies, ClusterTopologyNames);

TYPED_TEST(ClusterWeightSyncTest, VersionsReadExactlyAndNeverChange) {
  const std::string name = "sync-exact";
  const int last = this->nodes() - 1;
  const v1::Model model = CreateSeeded(this->node(0), name, kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const TensorBytes seeded = SeededModel(model);
  // Through the last node: a follower forwards Publish to the leader.
  absl::StatusOr<v1::PublishResponse> published =
      this->node(last).Publish(name, 3);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->version(), 3);
  // Every rank's shard copied once: (16 + 16*8 + 4*12 padded) floats.
  EXPECT_GT(published->bytes(), 0);
  this->ExpectVersion(name, 3, seeded);

  // A writeback after the publish changes the shards, not version 3.
  TensorBytes edited = seeded;
  edited["l0.w"] = SeededBytes("l0.w", 128, v1::DTYPE_FLOAT32, /*seed=*/99);
  const v1::Session session =
      OpenOk(this->node(last), name, ParamScope({"l0.w"}));
  WriteOk(this->node(last), session.id(), "l0.w", edited["l0.w"]);
  CloseOk(this->node(last), session.id());
  ASSERT_TRUE(this->node(0).Publish(name, 4).ok());
  this->ExpectVersion(name, 3, seeded);
  this->ExpectVersion(name, 4, edited);

  // bfloat16 from float32, converted where the bytes are.
  absl::StatusOr<client::SlicesData> bf16 = this->node(last).ReadSlices(
      Request(name, 4, {{"b", {16}, 0, {{2, 5}}}}, v1::DTYPE_BFLOAT16));
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->packed,
            SeededBytes("b", 16, v1::DTYPE_BFLOAT16).substr(4, 10));
  EXPECT_EQ(
      this->node(last).WaitVersion(name, 4, absl::Seconds(5)).value_or(-1), 4);
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

TYPED_TEST(ClusterWeightSyncTest, ReadsIntoASliceBufferThroughEveryNode) {
  const std::string name = "sync-into";
  const v1::Model model = CreateSeeded(this->node(0), name, kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const TensorBytes seeded = SeededModel(model);
  ASSERT_TRUE(this->node(0).Publish(name, 5).ok());
  const std::vector<Box> boxes = this->Boxes();
  for (int reader = 0; reader < this->nodes(); ++reader) {
    SCOPED_TRACE(absl::StrCat("read via node ", reader));
    absl::StatusOr<client::SliceBuffer> buffer =
        client::SliceBuffer::Create(4096);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    // Twice into the same buffer: the second read rewrites it whole.
    for (int round = 0; round < 2; ++round) {
      absl::StatusOr<client::SlicesData> read =
          this->node(reader).ReadSlices(Request(name, 5, boxes), &*buffer);
      ASSERT_TRUE(read.ok()) << read.status();
      // The daemon wrote the answer itself (same host): no data messages.
      EXPECT_TRUE(read->local_buffer);
      EXPECT_TRUE(read->packed.empty());
      EXPECT_TRUE(buffer->complete());
      int64_t remote = 0;
      for (size_t i = 0; i < boxes.size(); ++i) {
        const v1::SliceLayout& layout = read->entries[i];
        const std::vector<float> expected =
            Cut(boxes[i], BytesToFloats(seeded.at(boxes[i].fqn)), this->world(),
                TypeParam::kLocalRanks, reader, &remote);
        EXPECT_EQ(BytesToFloats(std::string(
                      reinterpret_cast<const char*>(buffer->packed()) +
                          layout.offset(),
                      layout.bytes())),
                  expected)
            << boxes[i].fqn << " entry " << i;
      }
      EXPECT_EQ(read->stats.peer_bytes(), remote);
      std::memset(buffer->mutable_packed(), 0xff, 64);  // Stale bytes.
    }
  }
  // A buffer too small: refused naming the entry, its header never
  // marked complete.
  absl::StatusOr<client::SliceBuffer> small = client::SliceBuffer::Create(16);
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<client::SlicesData> refused =
      this->node(0).ReadSlices(Request(name, 5, boxes), &*small);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "entry 0 ('l0.w'): ends at byte 256"))
      << refused.status();
  EXPECT_FALSE(small->complete());
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

TYPED_TEST(ClusterWeightSyncTest, BadEntriesAndVersionsAreRefusedNamingThem) {
  const std::string name = "sync-bad";
  const int last = this->nodes() - 1;
  CreateSeeded(this->node(0), name, kLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  // --max-versions is 2 (the default): publishing 3 releases 1.
  for (int64_t step : {1, 2, 3}) {
    ASSERT_TRUE(this->node(last).Publish(name, step).ok()) << step;
  }
  const Box good{"b", {16}, 0, {{0, 16}}};
  struct Bad {
    v1::ReadSlicesRequest request;
    absl::StatusCode code;
    std::string says;
  };
  v1::ReadSlicesRequest f16 = Request(name, 3, {good, good});
  f16.mutable_entries(1)->set_dtype(v1::DTYPE_FLOAT16);
  const Bad cases[] = {
      {Request(name, 1, {good}), absl::StatusCode::kFailedPrecondition,
       "version 1 of model 'sync-bad' was released (at most 2 are kept; "
       "kept: 2, 3)"},
      {Request(name, 9, {good}), absl::StatusCode::kNotFound,
       "version 9 of model 'sync-bad' was never published (kept: 2, 3)"},
      {Request(name, 3, {good, {"l0.w", {16, 8}, 0, {{10, 7}, {0, 8}}}}),
       absl::StatusCode::kOutOfRange,
       "entry 1 ('l0.w'): box [10, 10 + 7) of dimension 0 lies outside"},
      {Request(name, 3, {good, {"l0.nope", {1}, 0, {{0, 1}}}}),
       absl::StatusCode::kNotFound, "entry 1 ('l0.nope')"},
      {f16, absl::StatusCode::kInvalidArgument,
       "entry 1 ('b'): dtype float16 loses the range of the stored float32"},
  };
  for (int reader = 0; reader < this->nodes(); ++reader) {
    for (const Bad& bad : cases) {
      absl::StatusOr<client::SlicesData> read =
          this->node(reader).ReadSlices(bad.request);
      EXPECT_EQ(read.status().code(), bad.code) << read.status();
      EXPECT_TRUE(absl::StrContains(read.status().message(), bad.says))
          << "node " << reader << ": " << read.status();
    }
  }
  const absl::Status again = this->node(last).Publish(name, 3).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  const absl::Status late =
      this->node(last).WaitVersion(name, 4, absl::Milliseconds(300)).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

TYPED_TEST(ClusterWeightSyncTest, PublishNeverMixesSteps) {
  const std::string name = "sync-steps";
  CreateSeeded(this->node(0), name, kLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  std::vector<NodeTrainer> trainers = this->AttachTrainers(name);
  // Rank 0 steps alone: first inside OPTIMIZER, then past it while every
  // other rank is still at the step before.
  const std::vector<v1::TrainingPhase> step = {
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
      v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
      v1::TRAINING_PHASE_IDLE};
  for (size_t phase = 0; phase + 1 < step.size(); ++phase) {
    ASSERT_TRUE(trainers[0].Report(name, 0, step[phase], 1).ok());
  }
  absl::Status refused = this->node(0).Publish(name, 1).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.message(), "rank 0 is in OPTIMIZER"))
      << refused;
  ASSERT_TRUE(trainers[0].Report(name, 0, v1::TRAINING_PHASE_IDLE, 1).ok());
  refused = this->node(0).Publish(name, 1).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(refused.message(), "shards are of different steps"))
      << refused;
  for (const NodeTrainer& trainer : trainers) {
    for (int rank : trainer.ranks) {
      if (rank == 0) continue;
      for (v1::TrainingPhase phase : step) {
        ASSERT_TRUE(trainer.Report(name, rank, phase, 1).ok()) << rank;
      }
    }
  }
  EXPECT_TRUE(this->node(0).Publish(name, 1).ok());
  this->Detach(trainers);
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

// The copy on write at a rank's move into OPTIMIZER, on every node (the
// followers' included): each node's trainer steps and, once its OPTIMIZER
// report is answered, rewrites its ranks' shards in place (every value
// negated) as an optimizer does. Version 1, published before, still reads
// exactly the seeded values through every node; version 2 the new ones.
TYPED_TEST(ClusterWeightSyncTest, AVersionStaysExactWhileTheTrainersStep) {
  const std::string name = "sync-cow";
  const v1::Model model = CreateSeeded(this->node(0), name, kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const TensorBytes seeded = SeededModel(model);
  // Attached first: an attach copies the units of every kept version.
  std::vector<NodeTrainer> trainers = this->AttachTrainers(name);
  ASSERT_TRUE(this->node(0).Publish(name, 1).ok());
  StepNegating(trainers, name, 1);
  this->ExpectVersion(name, 1, seeded);
  TensorBytes negated;
  for (const auto& [fqn, bytes] : seeded) {
    std::vector<float> values = BytesToFloats(bytes);
    for (float& value : values) value = -value;
    negated[fqn] = FloatBytes(values);
  }
  ASSERT_TRUE(this->node(0).Publish(name, 2).ok());
  this->ExpectVersion(name, 2, negated);
  this->Detach(trainers);
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

// A unit large enough that each rank's piece of it (32 KiB) leaves the
// node holding it straight from the version's own copy, referenced rather
// than copied (peer_service_weight_sync.cc: pieces of 16 KiB or more).
constexpr char kLargeLayout[] = R"({"kind": "fsdp2", "strategy": "FULL_SHARD",
  "units": [{"fqn": "big", "params": [
    {"fqn": "big.w", "shape": [256, 128], "dtype": "float32"}]}]})";

// The version's copies after the trainers stepped (copied before their
// writes) read exactly through every node, whole and as a row band, in the
// stored dtype (referenced) and in bf16 (converted).
TYPED_TEST(ClusterWeightSyncTest, CopiedUnitsReadExactlyThroughEveryNode) {
  const std::string name = "sync-large";
  const v1::Model model = CreateSeeded(this->node(0), name, kLargeLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const std::vector<float> seeded =
      BytesToFloats(SeededModel(model).at("big.w"));
  std::vector<NodeTrainer> trainers = this->AttachTrainers(name);
  ASSERT_TRUE(this->node(0).Publish(name, 1).ok());
  StepNegating(trainers, name, 1);
  const std::vector<Box> boxes = {
      {"big.w", {256, 128}, 0, {{0, 256}, {0, 128}}},
      {"big.w", {256, 128}, 0, {{37, 150}, {0, 128}}}};
  for (int reader = 0; reader < this->nodes(); ++reader) {
    SCOPED_TRACE(absl::StrCat("read via node ", reader));
    absl::StatusOr<client::SlicesData> read =
        this->node(reader).ReadSlices(Request(name, 1, boxes));
    ASSERT_TRUE(read.ok()) << read.status();
    int64_t remote = 0;
    for (size_t i = 0; i < boxes.size(); ++i) {
      EXPECT_EQ(Floats(*read, static_cast<int>(i)),
                Cut(boxes[i], seeded, this->world(), TypeParam::kLocalRanks,
                    reader, &remote))
          << "entry " << i;
    }
    EXPECT_EQ(read->stats.peer_bytes(), remote);
    // Converted on the node that holds them: bf16 of the seeded values.
    absl::StatusOr<client::SlicesData> bf16 = this->node(reader).ReadSlices(
        Request(name, 1, {boxes[1]}, v1::DTYPE_BFLOAT16));
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_TRUE(bf16->packed ==
                SeededBytes("big.w", 256 * 128, v1::DTYPE_BFLOAT16)
                    .substr(37 * 128 * 2, 150 * 128 * 2));
  }
  this->Detach(trainers);
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

// The end of step `step` for every rank of `trainer`, each report asking
// to publish it (ReportPhaseRequest.publish_step): the versions the
// reports say they published.
std::vector<int64_t> EndStepPublishing(const NodeTrainer& trainer,
                                       const std::string& model, int64_t step) {
  std::vector<int64_t> published;
  for (int rank : trainer.ranks) {
    v1::ReportPhaseRequest request;
    request.set_model(model);
    request.set_rank(rank);
    request.set_phase(v1::TRAINING_PHASE_IDLE);
    request.set_step(step);
    request.set_lease_id(trainer.lease);
    request.set_publish_step(step);
    v1::ReportPhaseResponse response;
    const grpc::Status status = trainer.stub->ReportPhase(
        NodeTrainer::Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.publish_error(), "") << "rank " << rank;
    if (response.has_published()) published.push_back(response.published());
  }
  return published;
}

// The trainers publish at the ends of their steps, through every node (a
// follower forwards its trainer's reports to the leader): only the last
// rank's report publishes, each step's version reads exactly that step's
// values through every node while the next step rewrites the shards (the
// versions are copied ahead on every node, or before the write).
TYPED_TEST(ClusterWeightSyncTest, TheTrainersEndOfStepPublishesExactly) {
  const std::string name = "sync-end-of-step";
  const v1::Model model = CreateSeeded(this->node(0), name, kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const TensorBytes seeded = SeededModel(model);
  std::vector<NodeTrainer> trainers = this->AttachTrainers(name);
  const std::vector<v1::TrainingPhase> to_optimizer = {
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
      v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER};
  for (const NodeTrainer& trainer : trainers)
    trainer.Walk(name, to_optimizer, 1);
  std::vector<int64_t> published;
  for (const NodeTrainer& trainer : trainers) {
    for (int64_t version : EndStepPublishing(trainer, name, 1)) {
      published.push_back(version);
    }
  }
  EXPECT_EQ(published, std::vector<int64_t>{1});
  // Step 2 negates every value in place once OPTIMIZER is answered.
  published.clear();
  for (const NodeTrainer& trainer : trainers) {
    trainer.Walk(name, to_optimizer, 2);
    NegateEveryShard(trainer, name);
    for (int64_t version : EndStepPublishing(trainer, name, 2)) {
      published.push_back(version);
    }
  }
  EXPECT_EQ(published, std::vector<int64_t>{2});
  this->ExpectVersion(name, 1, seeded);
  TensorBytes negated;
  for (const auto& [fqn, bytes] : seeded) {
    std::vector<float> values = BytesToFloats(bytes);
    for (float& value : values) value = -value;
    negated[fqn] = FloatBytes(values);
  }
  this->ExpectVersion(name, 2, negated);
  this->Detach(trainers);
  ASSERT_TRUE(this->node(0).DeleteModel(name).ok());
}

}  // namespace
}  // namespace summon::tests
