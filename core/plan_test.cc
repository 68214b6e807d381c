#include "core/plan.h"

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

constexpr uint8_t kPaddingMarker = 42;  // FSDP's padding marker value.

ModelSpec ParseOrDie(const std::string& json, const Topology& topology,
                     std::optional<Strategy> strategy = std::nullopt) {
  absl::StatusOr<ModelSpec> model = ParseModelLayout(json, topology, strategy);
  EXPECT_TRUE(model.ok()) << model.status() << "\n" << json;
  return model.value_or(ModelSpec());
}

// Reference 1.3's two-Linear unit (25|3|5|3|35|1|7|1 = 80, c = 40, W = 2).
constexpr char kTwoLinear[] = R"({"units": [{"fqn": "", "params": [
  {"fqn": "lin1.weight", "shape": [5, 5], "dtype": "float32"},
  {"fqn": "lin1.bias", "shape": [5], "dtype": "float32"},
  {"fqn": "lin2.weight", "shape": [7, 5], "dtype": "float32"},
  {"fqn": "lin2.bias", "shape": [7], "dtype": "float32"}]}]})";

TEST(PlanTest, ExplicitParamGathersOnlyItsRanges) {
  ModelSpec model = ParseOrDie(kTwoLinear, Topology{1, 2});
  Scope scope = ResolveScope(model, {"", true, {"lin2.weight"}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  ASSERT_EQ(buffer.tensors.size(), 1u);
  EXPECT_EQ(buffer.total_bytes, 35 * 4);
  GatherPlan plan = PlanGather(model, buffer, Placement::kHomeRank, 0).value();
  ASSERT_EQ(plan.copies.size(), 1u);
  ASSERT_EQ(plan.transfers.size(), 2u);
  // Rank 0 holds lin2.weight[0..3] at flat 36..39 = shard bytes 144..159.
  EXPECT_EQ(plan.transfers[0].rank, 0);
  EXPECT_EQ(plan.transfers[0].shard_offset, 144);
  EXPECT_EQ(plan.transfers[0].buffer_offset, 0);
  EXPECT_EQ(plan.transfers[0].bytes, 16);
  // Rank 1 holds lin2.weight[4..34] at the start of its shard.
  EXPECT_EQ(plan.transfers[1].rank, 1);
  EXPECT_EQ(plan.transfers[1].shard_offset, 0);
  EXPECT_EQ(plan.transfers[1].buffer_offset, 16);
  EXPECT_EQ(plan.transfers[1].bytes, 31 * 4);
  WritebackPlan writeback = PlanWriteback(model, buffer, plan);
  ASSERT_EQ(writeback.transfers.size(), 2u);
  EXPECT_EQ(writeback.transfers[0].rank, 0);
  EXPECT_EQ(writeback.transfers[0].shard_offset, 144);
  EXPECT_EQ(writeback.transfers[1].rank, 1);
  EXPECT_EQ(writeback.transfers[1].bytes, 124);
}

TEST(PlanTest, HybridShardGathersWithinEachNode) {
  ModelSpec model =
      ParseOrDie(kTwoLinear, Topology{2, 2}, Strategy::kHybridShard);
  Scope scope = ResolveScope(model, {"", true, {}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  GatherPlan plan = PlanGather(model, buffer, Placement::kPerNode, 0).value();
  EXPECT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(CrossNodeBytes(model, plan.copies, plan.transfers), 0);
  // Every replica is written back: all four ranks receive data.
  WritebackPlan writeback = PlanWriteback(model, buffer, plan);
  std::map<int, int64_t> bytes_per_rank;
  for (const Transfer& t : writeback.transfers) bytes_per_rank[t.rank] += t.bytes;
  EXPECT_EQ(bytes_per_rank[0], bytes_per_rank[2]);
  EXPECT_EQ(bytes_per_rank[1], bytes_per_rank[3]);
  EXPECT_EQ(bytes_per_rank[0] + bytes_per_rank[1], (25 + 5 + 35 + 7) * 4);
}

// A cluster formed on its survivors (node 1 of 3 absent): replicas on the
// others serve every chunk, no copy lands on node 1 and nothing is written
// back to its rank; a stale node holds a copy but is never a source.
TEST(PlanTest, HybridShardOnTheSurvivorsLeavesTheAbsentNodeOut) {
  ModelSpec model =
      ParseOrDie(kTwoLinear, Topology{3, 1}, Strategy::kHybridShard);
  Scope scope = ResolveScope(model, {"", true, {}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  NodeSets nodes;
  nodes.absent = {1};
  GatherPlan plan =
      PlanGather(model, buffer, Placement::kPerNode, 0, nodes).value();
  ASSERT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(plan.copies[0].node, 0);
  EXPECT_EQ(plan.copies[1].node, 2);
  for (const Transfer& t : plan.transfers) EXPECT_NE(t.rank, 1);
  WritebackPlan writeback = PlanWriteback(model, buffer, plan, nodes.absent);
  std::set<int> written;
  for (const Transfer& t : writeback.transfers) written.insert(t.rank);
  EXPECT_EQ(written, (std::set<int>{0, 2}));

  NodeSets catching_up;
  catching_up.stale = {2};
  GatherPlan catch_up =
      PlanGather(model, buffer, Placement::kPerNode, 0, catching_up).value();
  ASSERT_EQ(catch_up.copies.size(), 3u);
  for (const Transfer& t : catch_up.transfers) EXPECT_NE(t.rank, 2);
}

TEST(PlanTest, FullShardOnTheSurvivorsNamesTheMissingRank) {
  ModelSpec model = ParseOrDie(kTwoLinear, Topology{2, 1});
  Scope scope = ResolveScope(model, {"", true, {}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  NodeSets nodes;
  nodes.absent = {1};
  absl::StatusOr<GatherPlan> plan =
      PlanGather(model, buffer, Placement::kPerNode, 0, nodes);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(plan.status().message(),
            "it needs rank 1 on node 1, which is not in the cluster (no node "
            "in the cluster holds a replica of its shard)");
  // lin1.weight lies in rank 0's chunk alone: it still gathers.
  Scope first = ResolveScope(model, {"", true, {"lin1.weight"}}).value();
  EXPECT_TRUE(PlanGather(model, LayoutSessionBuffer(model, first),
                         Placement::kPerNode, 0, nodes)
                  .ok());
  // rank0_only at a home on the absent node.
  EXPECT_EQ(PlanGather(model, buffer, Placement::kHomeRank, 1, nodes)
                .status()
                .message(),
            "the home rank 1 is on node 1, which is not in the cluster");
}

TEST(PlanTest, FullShardPerNodeCopiesCrossNodesAndRankZeroOnlyOneCopy) {
  ModelSpec model = ParseOrDie(kTwoLinear, Topology{2, 2});
  Scope scope = ResolveScope(model, {"", true, {}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  GatherPlan per_node =
      PlanGather(model, buffer, Placement::kPerNode, 0).value();
  // W = 4, c = 20. Node 0's copy pulls flat [40, 80) from ranks 2 and 3:
  // lin2.weight[4..34] and lin2.bias = 38 elements. Node 1's copy pulls
  // [0, 40): lin1.weight, lin1.bias and lin2.weight[0..3] = 34 elements.
  EXPECT_EQ(CrossNodeBytes(model, per_node.copies, per_node.transfers),
            (38 + 34) * 4);
  EXPECT_EQ(CopyBytesPerNode(model, buffer, per_node),
            (std::vector<int64_t>{buffer.total_bytes, buffer.total_bytes}));
  GatherPlan home = PlanGather(model, buffer, Placement::kHomeRank, 3).value();
  ASSERT_EQ(home.copies.size(), 1u);
  EXPECT_EQ(home.copies[0].node, 1);
  EXPECT_EQ(CopyBytesPerNode(model, buffer, home),
            (std::vector<int64_t>{0, buffer.total_bytes}));
  EXPECT_EQ(PlanGather(model, buffer, Placement::kHomeRank, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanTest, NetworkBytesCountOnlyTheScopedRangesThatCrossNodes) {
  ModelSpec model = ParseOrDie(kTwoLinear, Topology{2, 2});
  // Whole unit, one copy per node: node 0 sends flat [0, 40) minus padding
  // (25 + 5 + 4 elements), node 1 sends [40, 80) (31 + 7 elements), each to
  // the other node.
  Scope all = ResolveScope(model, {"", true, {}}).value();
  SessionBufferLayout all_buffer = LayoutSessionBuffer(model, all);
  GatherPlan per_node =
      PlanGather(model, all_buffer, Placement::kPerNode, 0).value();
  EXPECT_EQ(GatherNetworkBytes(model, per_node), (34 + 38) * 4);
  // An explicit list moves only its tensor: lin2.weight[0..3] from node 0,
  // lin2.weight[4..34] from node 1.
  Scope one = ResolveScope(model, {"", true, {"lin2.weight"}}).value();
  SessionBufferLayout one_buffer = LayoutSessionBuffer(model, one);
  EXPECT_EQ(GatherNetworkBytes(
                model,
                PlanGather(model, one_buffer, Placement::kPerNode, 0).value()),
            (4 + 31) * 4);
  // rank0_only with the home on node 1: only node 0's part travels, once.
  EXPECT_EQ(GatherNetworkBytes(
                model,
                PlanGather(model, one_buffer, Placement::kHomeRank, 3).value()),
            4 * 4);
  // Hybrid shard groups lie within a node: nothing crosses.
  ModelSpec hybrid =
      ParseOrDie(kTwoLinear, Topology{2, 2}, Strategy::kHybridShard);
  SessionBufferLayout hybrid_buffer = LayoutSessionBuffer(
      hybrid, ResolveScope(hybrid, {"", true, {}}).value());
  EXPECT_EQ(GatherNetworkBytes(
                hybrid,
                PlanGather(hybrid, hybrid_buffer, Placement::kPerNode, 0)
                    .value()),
            0);
}

// ---- Property tests over random layouts, topologies, strategies, scopes ----

// `fsdp2_world` > 0 makes an fsdp2 layout whose parameters may shard on a
// dim > 0; those dims are multiples of the world size, so every strategy's
// group size (W, L or 1, all dividing W) splits them evenly as torch needs.
std::string RandomLayoutJson(std::mt19937& rng, int fsdp2_world = 0,
                             const std::string& extra = "") {
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const char* dtypes[] = {"float32", "float64", "float16", "bfloat16"};
  std::vector<std::string> units;
  const int unit_count = pick(1, 4);
  for (int u = 0; u < unit_count; ++u) {
    const std::string unit_fqn = u == 0 ? "" : absl::StrCat("blocks.", u);
    const std::string prefix = u == 0 ? "" : unit_fqn + ".";
    const char* dtype = dtypes[pick(0, 3)];
    std::vector<std::string> params;
    const int param_count = pick(u == 0 ? 1 : 0, 4);
    for (int p = 0; p < param_count; ++p) {
      std::vector<int> shape;
      const int rank = pick(fsdp2_world > 0 ? 1 : 0, 3);
      for (int d = 0; d < rank; ++d) shape.push_back(pick(1, 6));
      std::string shard_dim;
      if (fsdp2_world > 0 && rank > 1 && pick(0, 1) == 1) {
        const int dim = pick(1, rank - 1);
        shape[dim] = fsdp2_world * pick(1, 2);
        shard_dim = absl::StrCat(R"(, "shard_dim": )", dim);
      }
      params.push_back(absl::StrCat(
          R"({"fqn": ")", prefix, "p", p, R"(", "shape": [)",
          absl::StrJoin(shape, ","), R"(], "dtype": ")", dtype, R"(")",
          shard_dim, "}"));
    }
    units.push_back(absl::StrCat(R"({"fqn": ")", unit_fqn, R"(", "params": [)",
                                 absl::StrJoin(params, ","), "]}"));
  }
  const std::string head =
      fsdp2_world > 0 ? R"("kind": "fsdp2")"
                      : absl::StrCat(R"("use_orig_params": )",
                                     pick(0, 1) ? "true" : "false");
  return absl::StrCat("{", head, extra, R"(, "units": [)",
                      absl::StrJoin(units, ","), "]}");
}

// Shards of every rank, filled the way a sharded model would be: each
// parameter's element bytes come from a per-parameter pattern, padding holds
// the marker.
using Shards = std::map<std::pair<int, int>, std::vector<uint8_t>>;

uint8_t PatternByte(int unit, int param, int64_t byte, int generation) {
  return static_cast<uint8_t>((unit * 131 + param * 31 + byte * 7 +
                               generation * 101) %
                                  251 +
                              1);
}

Shards MakeShards(const ModelSpec& model, int generation) {
  Shards shards;
  for (int rank = 0; rank < model.groups.topology.world_size(); ++rank) {
    const int position = model.groups.PositionOf(rank);
    for (size_t u = 0; u < model.units.size(); ++u) {
      const FlatParamLayout& layout = model.units[u].layout;
      std::vector<uint8_t> shard(layout.shard_bytes(), kPaddingMarker);
      const int64_t size = static_cast<int64_t>(ElementSize(layout.dtype()));
      for (size_t p = 0; p < layout.params().size(); ++p) {
        ShardSlice slice = layout.SliceOf(static_cast<int>(p), position);
        ForEachRun(slice, [&](int64_t intra, int64_t in_shard, int64_t n) {
          for (int64_t b = 0; b < n * size; ++b) {
            shard[in_shard * size + b] =
                PatternByte(u, p, intra * size + b, generation);
          }
        });
      }
      shards[{rank, static_cast<int>(u)}] = std::move(shard);
    }
  }
  return shards;
}

void CheckPlanProperties(const ModelSpec& model, const Scope& scope,
                         Placement placement, int home_rank,
                         const std::string& context, int* in_place_copies) {
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  absl::StatusOr<GatherPlan> plan =
      PlanGather(model, buffer, placement, home_rank);
  ASSERT_TRUE(plan.ok()) << plan.status() << context;

  // Every byte of every copy's tensors is written exactly once.
  std::vector<std::vector<int>> hits(
      plan->copies.size(), std::vector<int>(buffer.total_bytes, 0));
  for (const Transfer& t : plan->transfers) {
    for (int64_t b = 0; b < t.bytes; ++b) ++hits[t.copy][t.buffer_offset + b];
  }
  for (size_t c = 0; c < plan->copies.size(); ++c) {
    for (const SessionTensor& tensor : buffer.tensors) {
      for (int64_t b = 0; b < tensor.bytes(); ++b) {
        ASSERT_EQ(hits[c][tensor.buffer_offset + b], 1)
            << context << " copy " << c << " " << tensor.fqn << " byte " << b;
      }
    }
  }

  // The gather yields every full tensor, exactly.
  Shards shards = MakeShards(model, 0);
  const Shards original = shards;
  std::vector<std::vector<uint8_t>> copies(
      plan->copies.size(), std::vector<uint8_t>(buffer.total_bytes, 0));
  ShardAddress shard = [&](int rank, int unit) {
    return shards[{rank, unit}].data();
  };
  CopyAddress copy = [&](int c) { return copies[c].data(); };
  ExecuteGather(plan->transfers, shard, copy);
  for (size_t c = 0; c < copies.size(); ++c) {
    for (const SessionTensor& tensor : buffer.tensors) {
      for (int64_t b = 0; b < tensor.bytes(); ++b) {
        ASSERT_EQ(copies[c][tensor.buffer_offset + b],
                  PatternByte(tensor.location.unit, tensor.location.param, b, 0))
            << context << " copy " << c << " " << tensor.fqn << " byte " << b;
      }
    }
  }

  // Where the exchange lands in a copy (ExchangeLandsInCopy), the copy's
  // node writes its own slices and receives every peer's sent ranges at
  // their exchange offsets, straight into the copy: the same bytes.
  const std::vector<std::vector<ShardRange>> sent =
      RangesSentByNode(model, *plan);
  for (size_t c = 0; c < copies.size(); ++c) {
    if (!ExchangeLandsInCopy(model, *plan, static_cast<int>(c))) continue;
    ++*in_place_copies;
    const int node = plan->copies[c].node;
    std::vector<uint8_t> direct(buffer.total_bytes, 0);
    for (const Transfer& t : plan->transfers) {
      if (t.copy != static_cast<int>(c) ||
          model.groups.topology.NodeOf(t.rank) != node) {
        continue;
      }
      std::memcpy(direct.data() + t.buffer_offset,
                  shard(t.rank, t.unit) + t.shard_offset, t.bytes);
    }
    int64_t at = 0;
    for (size_t n = 0; n < sent.size(); ++n) {
      for (const auto& [rank, unit, offset, bytes] : sent[n]) {
        if (static_cast<int>(n) != node) {
          std::memcpy(direct.data() + at, shard(rank, unit) + offset, bytes);
        }
        at += bytes;
      }
    }
    for (const SessionTensor& tensor : buffer.tensors) {
      for (int64_t b = 0; b < tensor.bytes(); ++b) {
        ASSERT_EQ(direct[tensor.buffer_offset + b],
                  copies[c][tensor.buffer_offset + b])
            << context << " in-place copy " << c << " " << tensor.fqn
            << " byte " << b;
      }
    }
  }

  // Writeback of an unmodified gather restores the shards exactly.
  WritebackPlan writeback = PlanWriteback(model, buffer, *plan);
  ExecuteWriteback(writeback.transfers, shard, copy);
  ASSERT_EQ(shards, original) << context;

  // Writeback of edited tensors reaches every owner (all replicas) and
  // leaves padding and unscoped parameters untouched.
  for (size_t c = 0; c < copies.size(); ++c) {
    for (const SessionTensor& tensor : buffer.tensors) {
      for (int64_t b = 0; b < tensor.bytes(); ++b) {
        copies[c][tensor.buffer_offset + b] =
            PatternByte(tensor.location.unit, tensor.location.param, b, 1);
      }
    }
  }
  ExecuteWriteback(writeback.transfers, shard, copy);
  const Shards edited = MakeShards(model, 1);
  std::map<std::pair<int, int>, bool> scoped;
  for (const ScopedParam& param : scope.params) {
    scoped[{param.location.unit, param.location.param}] = true;
  }
  for (const auto& [key, bytes] : shards) {
    const auto [rank, unit] = key;
    const FlatParamLayout& layout = model.units[unit].layout;
    const int64_t size = static_cast<int64_t>(ElementSize(layout.dtype()));
    std::vector<uint8_t> expected = original.at(key);
    for (size_t p = 0; p < layout.params().size(); ++p) {
      if (!scoped.count({unit, static_cast<int>(p)})) continue;
      ShardSlice slice = layout.SliceOf(static_cast<int>(p),
                                        model.groups.PositionOf(rank));
      ForEachRun(slice, [&](int64_t, int64_t in_shard, int64_t n) {
        for (int64_t b = 0; b < n * size; ++b) {
          const int64_t at = in_shard * size + b;
          expected[at] = edited.at(key)[at];
        }
      });
    }
    ASSERT_EQ(bytes, expected) << context << " rank " << rank << " unit "
                               << unit;
  }
}

TEST(PlanPropertyTest, WritebackAfterGatherRestoresShardsAndCoversOnce) {
  std::mt19937 rng(20261122);
  const Strategy strategies[] = {Strategy::kFullShard, Strategy::kShardGradOp,
                                 Strategy::kNoShard, Strategy::kHybridShard,
                                 Strategy::kHybridShardZero2};
  const Placement placements[] = {Placement::kEveryRank, Placement::kPerNode,
                                  Placement::kHomeRank};
  int cases = 0;
  int in_place_copies = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::string json = RandomLayoutJson(rng);
    const int nodes = std::uniform_int_distribution<int>(1, 4)(rng);
    const int local = std::uniform_int_distribution<int>(1, 16 / nodes)(rng);
    const Topology topology{nodes, local};
    for (Strategy strategy : strategies) {
      ModelSpec model = ParseOrDie(json, topology, strategy);
      std::vector<ScopeRequest> requests = {{"", true, {}}, {"", false, {}}};
      const int unit = std::uniform_int_distribution<int>(
          0, static_cast<int>(model.units.size()) - 1)(rng);
      requests.push_back({model.units[unit].fqn, false, {}});
      std::vector<std::string> some_params;
      for (const auto& [fqn, location] : model.params_by_fqn) {
        if (rng() % 2) some_params.push_back(fqn);
      }
      if (!some_params.empty()) requests.push_back({"", true, some_params});
      for (const ScopeRequest& request : requests) {
        Scope scope = ResolveScope(model, request).value();
        for (Placement placement : placements) {
          const int home = static_cast<int>(rng() % topology.world_size());
          CheckPlanProperties(
              model, scope, placement, home,
              absl::StrCat(" [trial ", trial, " W=", nodes, "x", local,
                           " strategy ", StrategyName(strategy), " scope '",
                           request.module_fqn, "' placement ",
                           static_cast<int>(placement), "]"),
              &in_place_copies);
          if (HasFatalFailure()) return;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
  EXPECT_GT(in_place_copies, 0);
}

void CheckEveryScopeAndPlacement(const ModelSpec& model, std::mt19937& rng,
                                 const std::string& context, int* cases) {
  int in_place_copies = 0;
  const int world = model.groups.topology.world_size();
  for (const ScopeRequest& request :
       std::vector<ScopeRequest>{{"", true, {}}, {"", false, {}}}) {
    Scope scope = ResolveScope(model, request).value();
    for (Placement placement : {Placement::kEveryRank, Placement::kPerNode,
                                Placement::kHomeRank}) {
      CheckPlanProperties(model, scope, placement,
                          static_cast<int>(rng() % world),
                          absl::StrCat(context, " placement ",
                                       static_cast<int>(placement)),
                          &in_place_copies);
      if (::testing::Test::HasFatalFailure()) return;
      ++*cases;
    }
  }
}

// The same properties for FSDP2 layouts: dim-0 chunks with padding and empty
// chunks, strided chunks on a dim > 0, every strategy, and HSDP with an
// explicit shard_group_size.
TEST(PlanPropertyTest, Fsdp2WritebackAfterGatherRestoresShards) {
  std::mt19937 rng(20261126);
  const Strategy strategies[] = {Strategy::kFullShard, Strategy::kShardGradOp,
                                 Strategy::kNoShard, Strategy::kHybridShard,
                                 Strategy::kHybridShardZero2};
  int cases = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int nodes = std::uniform_int_distribution<int>(1, 4)(rng);
    const int local = std::uniform_int_distribution<int>(1, 16 / nodes)(rng);
    const Topology topology{nodes, local};
    const std::string json = RandomLayoutJson(rng, topology.world_size());
    for (Strategy strategy : strategies) {
      CheckEveryScopeAndPlacement(
          ParseOrDie(json, topology, strategy), rng,
          absl::StrCat(" [fsdp2 trial ", trial, " W=", nodes, "x", local,
                       " strategy ", StrategyName(strategy), "]"),
          &cases);
      if (HasFatalFailure()) return;
    }
    std::vector<int> divisors;
    for (int s = 1; s <= topology.world_size(); ++s) {
      if (topology.world_size() % s == 0) divisors.push_back(s);
    }
    const int size = divisors[rng() % divisors.size()];
    const std::string hsdp = RandomLayoutJson(
        rng, topology.world_size(),
        absl::StrCat(R"(, "strategy": "HYBRID_SHARD", "shard_group_size": )",
                     size));
    CheckEveryScopeAndPlacement(
        ParseOrDie(hsdp, topology), rng,
        absl::StrCat(" [hsdp trial ", trial, " W=", nodes, "x", local, " S=",
                     size, "]"),
        &cases);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cases, 1000);
}

TEST(PlanTest, ASingleParameterUnitAcrossNodesIsReceivedInPlace) {
  ModelSpec model = ParseOrDie(R"({"units": [{"fqn": "w", "params": [
    {"fqn": "w.weight", "shape": [1000], "dtype": "float32"}]}]})",
                               Topology{2, 2});
  Scope scope = ResolveScope(model, {"w", false, {}}).value();
  SessionBufferLayout buffer = LayoutSessionBuffer(model, scope);
  GatherPlan per_node =
      PlanGather(model, buffer, Placement::kPerNode, 0).value();
  ASSERT_EQ(per_node.copies.size(), 2u);
  EXPECT_TRUE(ExchangeLandsInCopy(model, per_node, 0));
  EXPECT_TRUE(ExchangeLandsInCopy(model, per_node, 1));
  // A single copy on node 0: node 0 sends nothing, so node 1's ranges come
  // first in the exchange but second in the copy.
  GatherPlan home = PlanGather(model, buffer, Placement::kHomeRank, 0).value();
  EXPECT_FALSE(ExchangeLandsInCopy(model, home, 0));
}

}  // namespace
}  // namespace summon::core
