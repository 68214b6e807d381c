// The sharding strategies by name, and the shard groups each makes of a
// topology (who shards with whom, and who holds the same shard): the part of
// a model's spec that depends only on the strategy, not on its parameters.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_spec.h"

namespace summon::core {
namespace {

struct StrategyNames {
  Strategy strategy;
  absl::string_view name;
};

constexpr StrategyNames kStrategies[] = {
    {Strategy::kFullShard, "FULL_SHARD"},
    {Strategy::kShardGradOp, "SHARD_GRAD_OP"},
    {Strategy::kNoShard, "NO_SHARD"},
    {Strategy::kHybridShard, "HYBRID_SHARD"},
    {Strategy::kHybridShardZero2, "_HYBRID_SHARD_ZERO2"},
};

}  // namespace

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  std::vector<absl::string_view> known;
  for (const auto& entry : kStrategies) {
    if (name == entry.name) return entry.strategy;
    known.push_back(entry.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sharding strategy '", name,
                   "' (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::string_view StrategyName(Strategy strategy) {
  for (const auto& entry : kStrategies) {
    if (entry.strategy == strategy) return entry.name;
  }
  return "UNKNOWN";  // Unreachable: every enumerator is listed above.
}

bool KeepsUnshardedBetweenForwardAndBackward(Strategy strategy) {
  return strategy == Strategy::kShardGradOp ||
         strategy == Strategy::kHybridShardZero2;
}

// Every strategy lays ranks out so that a shard group is G consecutive global
// ranks (all W, one node's L, or one rank) and replicas are G apart, so one
// formula serves all of them.
int ShardGroups::PositionOf(int rank) const {
  if (rank < 0 || rank >= topology.world_size()) return -1;
  return rank % group_size;
}

std::vector<int> ShardGroups::ShardGroupOf(int rank) const {
  std::vector<int> group;
  if (rank < 0 || rank >= topology.world_size()) return group;
  const int first = rank - rank % group_size;
  for (int position = 0; position < group_size; ++position) {
    group.push_back(first + position);
  }
  return group;
}

std::vector<int> ShardGroups::ReplicasOf(int rank) const {
  std::vector<int> replicas;
  if (rank < 0 || rank >= topology.world_size()) return replicas;
  for (int replica = rank % group_size; replica < topology.world_size();
       replica += group_size) {
    replicas.push_back(replica);
  }
  return replicas;
}

absl::StatusOr<ShardGroups> DeriveShardGroups(
    Strategy strategy, const Topology& topology,
    std::optional<int> shard_group_size) {
  if (topology.nodes < 1 || topology.local_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology needs nodes >= 1 and local_ranks >= 1, got ",
                     topology.nodes, " x ", topology.local_ranks));
  }
  if (topology.nodes > std::numeric_limits<int>::max() / topology.local_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology ", topology.nodes, " x ", topology.local_ranks,
                     " has more ranks than an int can count"));
  }
  ShardGroups groups;
  groups.declared = strategy;
  groups.effective = strategy;
  groups.topology = topology;
  switch (strategy) {
    case Strategy::kFullShard:
    case Strategy::kShardGradOp:
      groups.group_size = topology.world_size();
      break;
    case Strategy::kNoShard:
      groups.group_size = 1;
      break;
    case Strategy::kHybridShard:
    case Strategy::kHybridShardZero2:
      groups.group_size = shard_group_size.value_or(topology.local_ranks);
      break;
  }
  if (shard_group_size.has_value()) {
    if (strategy != Strategy::kHybridShard &&
        strategy != Strategy::kHybridShardZero2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_group_size is only for a hybrid strategy (HYBRID_SHARD, "
          "_HYBRID_SHARD_ZERO2), not ",
          StrategyName(strategy)));
    }
    if (*shard_group_size < 1 ||
        topology.world_size() % *shard_group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_group_size ", *shard_group_size,
          " must be >= 1 and divide the world size ", topology.world_size()));
    }
  }
  if (groups.group_size == 1) groups.effective = Strategy::kNoShard;  // R10.
  return groups;
}

}  // namespace summon::core
