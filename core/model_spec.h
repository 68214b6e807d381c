#ifndef SUMMON_CORE_MODEL_SPEC_H_
#define SUMMON_CORE_MODEL_SPEC_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/layout.h"

namespace summon::core {

enum class Strategy {
  kFullShard,
  kShardGradOp,
  kNoShard,
  kHybridShard,
  kHybridShardZero2,
};

// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
// "_HYBRID_SHARD_ZERO2" (FSDP's spellings).
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);
absl::string_view StrategyName(Strategy strategy);
// SHARD_GRAD_OP and _HYBRID_SHARD_ZERO2 keep the unsharded parameters between
// forward and backward (rule R4).
bool KeepsUnshardedBetweenForwardAndBackward(Strategy strategy);

// Nodes x local ranks. Global rank = node * local_ranks + local rank.
struct Topology {
  int nodes = 1;
  int local_ranks = 1;

  int world_size() const { return nodes * local_ranks; }
  int NodeOf(int rank) const { return rank / local_ranks; }
  int LocalRankOf(int rank) const { return rank % local_ranks; }
};

// Who shards with whom and who replicates whom, derived from the strategy and
// the topology. FULL_SHARD/SHARD_GRAD_OP: one shard group of all W ranks.
// NO_SHARD: groups of one, every rank a replica. Hybrid: shard within a node
// (G = L), replicate across nodes. A group of size 1 behaves as NO_SHARD
// (R10), so `effective` may differ from `declared`.
struct ShardGroups {
  Strategy declared = Strategy::kFullShard;
  Strategy effective = Strategy::kFullShard;
  Topology topology;
  int group_size = 1;  // G.

  // Position of `rank` in its shard group: it owns chunk Position(rank).
  // A rank outside [0, W) gets -1 here and empty lists below.
  int PositionOf(int rank) const;
  // Global ranks of the shard group containing `rank`, by position.
  std::vector<int> ShardGroupOf(int rank) const;
  // Global ranks holding the same chunk as `rank` (itself included), by rank.
  std::vector<int> ReplicasOf(int rank) const;
};

// `shard_group_size` (HSDP's shard-mesh size S, hybrid strategies only,
// dividing W) replaces the hybrid default G = L: shard groups of S
// consecutive ranks, replicated W / S times.
absl::StatusOr<ShardGroups> DeriveShardGroups(
    Strategy strategy, const Topology& topology,
    std::optional<int> shard_group_size = std::nullopt);

// An FSDP unit: an FQN prefix ("" = root) and its flat parameter.
struct UnitSpec {
  std::string fqn;
  int parent = -1;  // Index in ModelSpec::units, -1 for a top unit.
  FlatParamLayout layout;
};

// Where a parameter (or a tied alias, resolved to its primary) lives.
struct ParamLocation {
  int unit = -1;
  int param = -1;  // Index in units[unit].layout.params().
};

// A model as the daemon knows it: units in parent-before-child order.
struct ModelSpec {
  LayoutKind kind = LayoutKind::kFlat;  // Every unit's layout kind.
  Strategy strategy = Strategy::kFullShard;
  bool use_orig_params = true;
  std::optional<DType> compute_dtype;
  ShardGroups groups;
  std::vector<UnitSpec> units;
  // Every parameter FQN, aliases included, to its primary's location.
  std::map<std::string, ParamLocation> params_by_fqn;
  // Alias FQN -> primary FQN.
  std::map<std::string, std::string> aliases;

  // NOT_FOUND (R11) naming `fqn` when unknown.
  absl::StatusOr<ParamLocation> FindParam(absl::string_view fqn) const;
  absl::StatusOr<int> FindUnit(absl::string_view fqn) const;
  const FlatParamEntry& Param(const ParamLocation& location) const {
    return units[location.unit].layout.params()[location.param];
  }
};

// True when `fqn` is `module` or lies below it ("" is above everything;
// "layers.1" is not above "layers.10").
bool IsUnderModule(absl::string_view fqn, absl::string_view module);

// Parses the JSON layout file (docs/design.md#the-layout-file) and builds
// every unit's flat layout for `topology`. `strategy_override` replaces the
// file's strategy (summonctl model create --strategy). Errors are
// INVALID_ARGUMENT naming the offending unit or parameter. An alias must name a
// parameter listed before it; an alias of an alias resolves to the primary.
absl::StatusOr<ModelSpec> ParseModelLayout(
    absl::string_view json, const Topology& topology,
    std::optional<Strategy> strategy_override = std::nullopt);

}  // namespace summon::core

#endif  // SUMMON_CORE_MODEL_SPEC_H_
