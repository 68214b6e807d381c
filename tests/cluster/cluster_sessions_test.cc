// Sessions across real summond processes, 2 nodes x 2 ranks and 3 nodes x 1
// rank: every sharding strategy and session option, exact values from the
// seeded init, writeback reaching every replica on every node, clients on
// any node operating any session, and the rules decided for the whole
// cluster (R1, R2, R3, R12).

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

using ::summon::client::SummonClient;

constexpr const char* kLayout = kUnevenLayout;
constexpr int kPrimaryParams = 6;
constexpr int64_t kModelNumel = 36 + 6 + 25 + 5 + 21 + 35;
// Float32 bytes of every primary parameter, model order.
const std::vector<int64_t> kModelTensorBytes = {144, 24, 100, 20, 84, 140};
// Seed of the values tests write (distinct from the model's kSeed).
constexpr uint64_t kEditSeed = 99;

constexpr v1::ShardingStrategy kStrategies[] = {
    v1::SHARDING_STRATEGY_FULL_SHARD, v1::SHARDING_STRATEGY_SHARD_GRAD_OP,
    v1::SHARDING_STRATEGY_NO_SHARD, v1::SHARDING_STRATEGY_HYBRID_SHARD,
    v1::SHARDING_STRATEGY_HYBRID_SHARD_ZERO2};

template <typename Topology>
class ClusterSessionsTest : public SharedClusterTest<Topology> {
 protected:
  // G of a strategy on this cluster.
  int GroupSize(v1::ShardingStrategy strategy) const {
    switch (strategy) {
      case v1::SHARDING_STRATEGY_NO_SHARD:
        return 1;
      case v1::SHARDING_STRATEGY_HYBRID_SHARD:
      case v1::SHARDING_STRATEGY_HYBRID_SHARD_ZERO2:
        return this->cluster().local_ranks();
      default:
        return this->world();
    }
  }
  // Full copies of every parameter across the world's shards.
  int Replicas(v1::ShardingStrategy strategy) const {
    return this->world() / GroupSize(strategy);
  }
};

TYPED_TEST_SUITE(ClusterSessionsTest, ClusterTopologies, ClusterTopologyNames);

// Float32 values rounded to bfloat16 bits (nearest even), computed here
// rather than by the library under test. Seeded values are finite.
std::string BFloat16Bits(const std::vector<float>& values) {
  std::string bytes;
  for (float value : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    bits += 0x7fff + ((bits >> 16) & 1);
    bytes.push_back(static_cast<char>((bits >> 16) & 0xff));
    bytes.push_back(static_cast<char>(bits >> 24));
  }
  return bytes;
}

// `full` with the elements whose owning rank (position = rank: the group
// spans the world) is not in `ranks` set to zero.
TensorBytes KeepOwnedBy(const v1::Model& model, TensorBytes full,
                        const std::vector<int32_t>& ranks) {
  const std::set<int> kept(ranks.begin(), ranks.end());
  for (auto& [fqn, bytes] : full) {
    std::vector<float> values = BytesToFloats(bytes);
    for (size_t i = 0; i < values.size(); ++i) {
      if (kept.count(OwningPosition(model, fqn, i)) == 0) values[i] = 0.0f;
    }
    bytes = FloatBytes(values);
  }
  return full;
}

// Every tensor of `expected` reads back as it through every node.
template <typename Test>
void ExpectReadsEverywhere(const Test& test, const std::string& session,
                           const TensorBytes& expected, bool grad = false) {
  for (int reader = 0; reader < test.nodes(); ++reader) {
    for (const auto& [fqn, bytes] : expected) {
      EXPECT_EQ(BytesToFloats(ReadOk(test.node(reader), session, fqn, grad)),
                BytesToFloats(bytes))
          << fqn << (grad ? " (grad)" : "") << " read via node " << reader;
    }
  }
}

TYPED_TEST(ClusterSessionsTest, SeededValuesAndChecksumsAreExactEverywhere) {
  for (const v1::ShardingStrategy strategy : kStrategies) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("values-", strategy);
    // Created through a follower, which forwards to the leader.
    const v1::Model model =
        CreateSeeded(this->node(this->nodes() - 1), name, kLayout, strategy);
    EXPECT_EQ(model.nodes(), this->nodes());
    EXPECT_EQ(model.world_size(), this->world());
    EXPECT_EQ(model.group_size(), this->GroupSize(strategy));
    // R10: a shard group of one rank is NO_SHARD.
    EXPECT_EQ(model.effective_strategy(), this->GroupSize(strategy) == 1
                                              ? v1::SHARDING_STRATEGY_NO_SHARD
                                              : strategy);
    const TensorBytes seeded = SeededModel(model);
    for (int via = 0; via < this->nodes(); ++via) {
      const v1::ModelChecksumResponse sums = ChecksumOk(this->node(via), name);
      EXPECT_EQ(sums.shards_size(), this->world() * model.units_size());
      EXPECT_EQ(ParamChecksums(sums), ExpectedChecksums(model, seeded))
          << "ModelChecksum via node " << via;
    }
    // One copy per node (writable, read-only, offloaded) and one on the
    // last rank (rank0_only): with HYBRID_SHARD every node gathers from its
    // own ranks, rank0_only gathers across nodes.
    v1::SessionOptions offloaded = ReadOnly();
    offloaded.set_offload_to_cpu(true);
    const v1::SessionOptions placements[] = {
        v1::SessionOptions(), ReadOnly(), offloaded,
        Rank0Only(this->world() - 1, ReadOnly())};
    for (size_t p = 0; p < std::size(placements); ++p) {
      SCOPED_TRACE(placements[p].ShortDebugString());
      const int opener = static_cast<int>(p) % this->nodes();
      const v1::Session session =
          OpenOk(this->node(opener), name, placements[p]);
      EXPECT_EQ(session.params_size(), kPrimaryParams);
      ExpectReadsEverywhere(*this, session.id(), seeded);
      // A tied alias reads as its primary.
      EXPECT_EQ(BytesToFloats(ReadOk(this->node(this->nodes() - 1),
                                     session.id(), "head.w")),
                BytesToFloats(seeded.at("embed.w")));
      CloseOk(this->node((opener + 1) % this->nodes()), session.id());
    }
  }
}

TYPED_TEST(ClusterSessionsTest, WritebackReachesEveryReplicaOnEveryNode) {
  for (const v1::ShardingStrategy strategy : kStrategies) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("writeback-", strategy);
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy);
    const TensorBytes edited = SeededModel(model, kEditSeed);
    const int opener = strategy % this->nodes();
    const int writer = (opener + 1) % this->nodes();
    const v1::Session session =
        OpenOk(this->node(opener), name, v1::SessionOptions());
    for (const auto& [fqn, bytes] : edited) {
      WriteOk(this->node(writer), session.id(), fqn, bytes);
    }
    // Read-your-writes through every node before the close.
    ExpectReadsEverywhere(*this, session.id(), edited);
    const v1::CloseSessionResponse closed =
        CloseOk(this->node(this->nodes() - 1), session.id());
    EXPECT_TRUE(closed.written_back());
    // Every element into every replica, padding never.
    EXPECT_EQ(closed.bytes_written(),
              this->Replicas(strategy) * kModelNumel * 4);
    for (int via = 0; via < this->nodes(); ++via) {
      EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(via), name)),
                ExpectedChecksums(model, edited))
          << "ModelChecksum via node " << via;
    }
    for (int via = 0; via < this->nodes(); ++via) {
      const v1::Session check = OpenOk(this->node(via), name, ReadOnly());
      for (const auto& [fqn, bytes] : edited) {
        EXPECT_EQ(BytesToFloats(ReadOk(this->node(via), check.id(), fqn)),
                  BytesToFloats(bytes))
            << fqn << " after writeback, via node " << via;
      }
      CloseOk(this->node(via), check.id());
    }
  }
}

TYPED_TEST(ClusterSessionsTest,
           Rank0OnlyWritebackScattersFromAHomeOnTheLastNode) {
  const std::vector<std::string> scoped = {"layers.0.attn.w", "layers.0.attn.b",
                                           "layers.0.mlp.w"};
  for (const v1::ShardingStrategy strategy : kStrategies) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("home-", strategy);
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy);
    const TensorBytes seeded = SeededModel(model);
    const int home = this->world() - 1;
    ASSERT_EQ(this->cluster().NodeOf(home), this->nodes() - 1);
    const v1::Session session =
        OpenOk(this->node(0), name, Rank0Only(home, ModuleScope("layers.0")));
    EXPECT_TRUE(session.options().rank0_only());
    EXPECT_EQ(session.options().home_rank(), home);
    // Reads through node 0 are proxied from the home node.
    TensorBytes expected;
    for (const std::string& fqn : scoped) expected[fqn] = seeded.at(fqn);
    ExpectReadsEverywhere(*this, session.id(), expected);
    TensorBytes edited = seeded;
    edited["layers.0.mlp.w"] =
        SeededModel(model, kEditSeed).at("layers.0.mlp.w");
    WriteOk(this->node(0), session.id(), "layers.0.mlp.w",
            edited.at("layers.0.mlp.w"));
    expected["layers.0.mlp.w"] = edited.at("layers.0.mlp.w");
    ExpectReadsEverywhere(*this, session.id(), expected);
    const v1::CloseSessionResponse closed =
        CloseOk(this->node(0), session.id());
    EXPECT_TRUE(closed.written_back());
    EXPECT_EQ(closed.bytes_written(),
              this->Replicas(strategy) * (25 + 5 + 21) * 4);
    for (int via = 0; via < this->nodes(); ++via) {
      EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(via), name)),
                ExpectedChecksums(model, edited))
          << "ModelChecksum via node " << via;
    }
  }
}

TYPED_TEST(ClusterSessionsTest, ParamListSessionsHoldOnlyTheListedTensors) {
  for (const v1::ShardingStrategy strategy : kStrategies) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("params-", strategy);
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy);
    const int last = this->nodes() - 1;
    // Listed out of model order; the session reports model order.
    const v1::Session session = OpenOk(
        this->node(last), name,
        Rank0Only(this->world() - 1, ParamScope({"layers.1.w", "norm.w"})));
    ASSERT_EQ(session.params_size(), 2);
    EXPECT_EQ(session.params(0).fqn(), "norm.w");
    EXPECT_EQ(session.params(0).numel(), 6);
    EXPECT_EQ(session.params(1).fqn(), "layers.1.w");
    EXPECT_EQ(session.params(1).numel(), 35);
    // One copy (at home) of just these two tensors.
    EXPECT_EQ(session.bytes(), SessionBufferBytes({6 * 4, 35 * 4}));
    client::ReadTensorParams unlisted;
    unlisted.tensor = {session.id(), "embed.w", false};
    EXPECT_EQ(this->node(0).ReadTensor(unlisted).status().code(),
              absl::StatusCode::kNotFound);
    TensorBytes edited = SeededModel(model);
    edited["layers.1.w"] = SeededModel(model, kEditSeed).at("layers.1.w");
    WriteOk(this->node(0), session.id(), "layers.1.w", edited.at("layers.1.w"));
    const v1::CloseSessionResponse closed =
        CloseOk(this->node(0), session.id());
    EXPECT_TRUE(closed.written_back());
    // Only the listed parameters are written back, in every replica.
    EXPECT_EQ(closed.bytes_written(), this->Replicas(strategy) * (6 + 35) * 4);
    EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(last), name)),
              ExpectedChecksums(model, edited));
    // A list gathers only its tensors' bytes: with one copy per node, every
    // element held by one rank (FULL_SHARD, SHARD_GRAD_OP) travels to each
    // other node once; replicated or node-local shard groups move nothing.
    v1::SessionOptions listed = ParamScope({"layers.1.w", "norm.w"});
    listed.set_writeback(false);
    const v1::Session per_node = OpenOk(this->node(0), name, listed);
    const bool sharded_across_nodes =
        strategy == v1::SHARDING_STRATEGY_FULL_SHARD ||
        strategy == v1::SHARDING_STRATEGY_SHARD_GRAD_OP;
    EXPECT_EQ(per_node.network_bytes(),
              sharded_across_nodes ? (6 + 35) * 4 * (this->nodes() - 1) : 0);
    CloseOk(this->node(0), per_node.id());
  }
}

TYPED_TEST(ClusterSessionsTest, SessionBytesCountOneCopyPerNodeOrOneAtHome) {
  const std::string name = "bytes";
  CreateSeeded(this->node(0), name, kLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  const int64_t one_copy = SessionBufferBytes(kModelTensorBytes);
  // Session.bytes: "physical bytes of the session's copies over all memory
  // domains"; a CPU cluster keeps one host copy per node.
  const v1::Session per_node = OpenOk(this->node(0), name, ReadOnly());
  EXPECT_EQ(per_node.bytes(), this->nodes() * one_copy);
  CloseOk(this->node(0), per_node.id());
  const v1::Session at_home =
      OpenOk(this->node(0), name, Rank0Only(this->world() - 1, ReadOnly()));
  EXPECT_EQ(at_home.bytes(), one_copy);
  CloseOk(this->node(0), at_home.id());
}

TYPED_TEST(ClusterSessionsTest, WithGradsReadsZerosWhereTheOwnerHasNone) {
  for (const v1::ShardingStrategy strategy : kStrategies) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("grads-", strategy);
    // Sharded over the world: gradients on rank 1 and the last rank only.
    // Replicated strategies: on every rank (empty list), so whichever
    // replica a copy is gathered from holds them.
    const bool sharded = this->GroupSize(strategy) == this->world();
    const std::vector<int32_t> grad_ranks =
        sharded ? std::vector<int32_t>{1, this->world() - 1}
                : std::vector<int32_t>{};
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy, grad_ranks);
    const std::set<int> with_grads(grad_ranks.begin(), grad_ranks.end());
    std::vector<bool> has_grads;
    std::vector<bool> expected_has_grads;
    for (const v1::RankState& rank : model.ranks()) {
      has_grads.push_back(rank.has_grads());
      expected_has_grads.push_back(!sharded ||
                                   with_grads.count(rank.rank()) > 0);
    }
    // Model.ranks covers the whole world, not only the leader's ranks.
    EXPECT_EQ(has_grads, expected_has_grads) << "RankState.has_grads by rank";
    const TensorBytes grads = SeededGrads(model);
    const TensorBytes expected =
        sharded ? KeepOwnedBy(model, grads, grad_ranks) : grads;
    const std::vector<int> checked(grad_ranks.begin(), grad_ranks.end());
    EXPECT_EQ(GradChecksums(ChecksumOk(this->node(this->nodes() - 1), name)),
              ExpectedChecksums(model, grads, checked));

    v1::SessionOptions options = ReadOnly();
    options.set_with_grads(true);
    options.set_offload_to_cpu(true);
    const v1::Session session =
        OpenOk(this->node(this->nodes() - 1), name, options);
    EXPECT_EQ(session.grads_size(), kPrimaryParams);
    ExpectReadsEverywhere(*this, session.id(), expected, /*grad=*/true);
    ExpectReadsEverywhere(*this, session.id(), SeededModel(model));
    CloseOk(this->node(0), session.id());

    // Gradient writeback lands on the ranks that keep gradients only.
    v1::SessionOptions writable = ModuleScope("layers.1");
    writable.set_with_grads(true);
    const v1::Session edit = OpenOk(this->node(0), name, writable);
    TensorBytes edited = grads;
    edited["layers.1.w"] = SeededModel(model, kEditSeed).at("layers.1.w");
    WriteOk(this->node(this->nodes() - 1), edit.id(), "layers.1.w",
            edited.at("layers.1.w"), v1::DTYPE_FLOAT32, /*grad=*/true);
    EXPECT_TRUE(
        CloseOk(this->node(this->nodes() - 1), edit.id()).written_back());
    const v1::ModelChecksumResponse sums = ChecksumOk(this->node(0), name);
    EXPECT_EQ(GradChecksums(sums), ExpectedChecksums(model, edited, checked));
    EXPECT_EQ(ParamChecksums(sums),
              ExpectedChecksums(model, SeededModel(model)));
  }
}

TYPED_TEST(ClusterSessionsTest, ReadDtypeBfloat16GivesNearestEvenBits) {
  for (const v1::ShardingStrategy strategy :
       {v1::SHARDING_STRATEGY_FULL_SHARD, v1::SHARDING_STRATEGY_HYBRID_SHARD}) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("bf16-", strategy);
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy);
    v1::SessionOptions per_node = ReadOnly();
    per_node.set_read_dtype(v1::DTYPE_BFLOAT16);
    for (const v1::SessionOptions& options :
         {per_node, Rank0Only(this->world() - 1, per_node)}) {
      const v1::Session session = OpenOk(this->node(0), name, options);
      for (int reader = 0; reader < this->nodes(); ++reader) {
        for (const auto& [fqn, numel] : PrimaryParams(model)) {
          client::ReadTensorParams read;
          read.tensor = {session.id(), fqn, false};
          absl::StatusOr<client::TensorData> data =
              this->node(reader).ReadTensor(read);
          ASSERT_TRUE(data.ok()) << fqn << ": " << data.status();
          EXPECT_EQ(data->info.dtype(), v1::DTYPE_BFLOAT16) << fqn;
          EXPECT_EQ(data->data, BFloat16Bits(SeededFloats(fqn, numel)))
              << fqn << " via node " << reader << ", "
              << options.ShortDebugString();
        }
      }
      CloseOk(this->node(0), session.id());
    }
  }
}

TYPED_TEST(ClusterSessionsTest, ASessionIsOperatedThroughAnyNode) {
  const std::string name = "cross";
  CreateSeeded(this->node(0), name, kLayout,
               v1::SHARDING_STRATEGY_HYBRID_SHARD);
  const int last = this->nodes() - 1;
  uint64_t seed = kEditSeed;
  const std::pair<int, int> directions[] = {{0, last}, {last, 0}};
  for (const auto& [opener, operator_node] : directions) {
    SCOPED_TRACE(absl::StrCat("opened via node ", opener,
                              ", operated via node ", operator_node));
    const SummonClient& opened_via = this->node(opener);
    const SummonClient& operated_via = this->node(operator_node);
    const v1::Session session =
        OpenOk(opened_via, name, ModuleScope("layers.1"));
    absl::StatusOr<v1::Session> got = operated_via.GetSession(session.id());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->id(), session.id());
    EXPECT_EQ(got->state(), v1::SESSION_STATE_OPEN);
    absl::StatusOr<v1::Session> renewed =
        operated_via.RenewSession(session.id());
    ASSERT_TRUE(renewed.ok()) << renewed.status();
    EXPECT_GE(renewed->expires_at_unix_ms(), session.expires_at_unix_ms());

    const std::string edited =
        SeededBytes("layers.1.w", 35, v1::DTYPE_FLOAT32, ++seed);
    WriteOk(operated_via, session.id(), "layers.1.w", edited);
    EXPECT_EQ(BytesToFloats(ReadOk(opened_via, session.id(), "layers.1.w")),
              BytesToFloats(edited));
    const std::vector<float> values = BytesToFloats(edited);
    absl::StatusOr<v1::TensorStatsResponse> stats =
        this->node(1).TensorStats(session.id(), {"layers.1.w"});
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_EQ(stats->tensors_size(), 1);
    EXPECT_EQ(stats->tensors(0).min(),
              *std::min_element(values.begin(), values.end()));
    EXPECT_EQ(stats->tensors(0).max(),
              *std::max_element(values.begin(), values.end()));

    EXPECT_TRUE(CloseOk(operated_via, session.id()).written_back());
    // An ended session says so, from any node (R25).
    const absl::Status ended = opened_via.GetSession(session.id()).status();
    EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(ended.message(), ": closed")) << ended;
    const v1::Session check = OpenOk(opened_via, name, ReadOnly());
    EXPECT_EQ(BytesToFloats(ReadOk(opened_via, check.id(), "layers.1.w")),
              BytesToFloats(edited));
    CloseOk(operated_via, check.id());
  }
}

TYPED_TEST(ClusterSessionsTest, OnlyTheOwnerOperatesASessionOnAnyNode) {
  const std::string name = "owners";
  CreateSeeded(this->node(0), name, kLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  const int last = this->nodes() - 1;
  client::ClientOptions alice_options;
  alice_options.principal = "alice";
  client::ClientOptions bob_options;
  bob_options.principal = "bob";
  const SummonClient alice_on_0(this->cluster().address(0), alice_options);
  const SummonClient alice_on_last(this->cluster().address(last),
                                   alice_options);
  const SummonClient bob_on_last(this->cluster().address(last), bob_options);
  const v1::Session session = OpenOk(alice_on_0, name, ModuleScope("layers.0"));
  EXPECT_EQ(session.owner(), "alice");
  // R12: the principal travels with the call forwarded to the leader.
  EXPECT_EQ(bob_on_last.GetSession(session.id()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(bob_on_last.CloseSession(session.id()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(alice_on_last.GetSession(session.id()).ok());
  // Nothing was written, so the owner's close writes nothing back (R22).
  const v1::CloseSessionResponse closed = CloseOk(alice_on_last, session.id());
  EXPECT_FALSE(closed.written_back());
  EXPECT_EQ(closed.reason(), "nothing written");
}

TYPED_TEST(ClusterSessionsTest, PhasesOfRanksOnAnyNodeGateOpens) {
  const std::string name = "phases";
  CreateSeeded(this->node(0), name, kLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  const int last = this->nodes() - 1;
  const int last_rank = this->world() - 1;
  ASSERT_TRUE(this->node(last)
                  .ReportPhase(name, last_rank, v1::TRAINING_PHASE_FORWARD)
                  .ok());
  absl::StatusOr<v1::Model> described = this->node(0).DescribeModel(name);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->ranks(last_rank).phase(), v1::TRAINING_PHASE_FORWARD);
  // R1, decided by the leader from a phase reported to another node.
  EXPECT_EQ(
      this->node(0).OpenSession(name, ModuleScope("layers.1")).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(this->node(last)
                .OpenSession(name, ReadOnly(ModuleScope("layers.1")))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(this->node(last)
                  .ReportPhase(name, last_rank, v1::TRAINING_PHASE_IDLE)
                  .ok());
  const v1::Session session =
      OpenOk(this->node(0), name, ModuleScope("layers.1"));
  // R3: the writable session on node 0 holds the last rank's trainer.
  EXPECT_EQ(this->node(last)
                .ReportPhase(name, last_rank, v1::TRAINING_PHASE_FORWARD)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  CloseOk(this->node(last), session.id());
  EXPECT_TRUE(this->node(last)
                  .ReportPhase(name, last_rank, v1::TRAINING_PHASE_FORWARD)
                  .ok());
  EXPECT_TRUE(this->node(last)
                  .ReportPhase(name, last_rank, v1::TRAINING_PHASE_IDLE)
                  .ok());
}

TYPED_TEST(ClusterSessionsTest, OneWritableSessionPerUnitAcrossNodes) {
  const std::string name = "locks";
  CreateSeeded(this->node(0), name, kLayout,
               v1::SHARDING_STRATEGY_HYBRID_SHARD);
  const int last = this->nodes() - 1;
  const v1::Session holder =
      OpenOk(this->node(0), name, ModuleScope("layers.0"));
  // R2 across nodes: the same unit, directly or under a recursive scope.
  EXPECT_EQ(this->node(last)
                .OpenSession(name, ModuleScope("layers.0"))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(this->node(last).OpenSession(name, ModuleScope("")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const v1::Session reader =
      OpenOk(this->node(last), name, ReadOnly(ModuleScope("layers.0")));
  const v1::Session other =
      OpenOk(this->node(last), name, ModuleScope("layers.1"));
  CloseOk(this->node(0), other.id());
  CloseOk(this->node(0), reader.id());
  CloseOk(this->node(last), holder.id());
}

}  // namespace
}  // namespace summon::tests
