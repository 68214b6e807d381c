// Fuzzes the layout JSON parser (summonctl model create --layout FILE) and
// the flat-parameter layouts it builds.
//
// Input: byte 0 picks 1-4 nodes, byte 1 picks 1-8 local ranks, byte 2 an
// optional strategy override; the rest is the layout JSON. Beyond the
// sanitizers, an accepted layout must shard consistently: every rank has a
// position in a group of G ranks, every parameter's elements are owned
// exactly once across the G positions and fit in the chunk, and every
// parameter FQN resolves to itself.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/layout.h"
#include "core/model_spec.h"

namespace {

using summon::core::FlatParamLayout;
using summon::core::ModelSpec;
using summon::core::Strategy;

constexpr Strategy kStrategies[] = {
    Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard,
    Strategy::kHybridShard, Strategy::kHybridShardZero2};
constexpr int kStrategyCount = sizeof(kStrategies) / sizeof(kStrategies[0]);

void Check(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "layout invariant broken: %s\n", what.c_str());
  std::abort();
}

void CheckGroups(const ModelSpec& spec) {
  const int world = spec.groups.topology.world_size();
  const int group_size = spec.groups.group_size;
  Check(group_size >= 1 && world % group_size == 0,
        absl::StrCat("group size ", group_size, " vs world ", world));
  for (int rank = 0; rank < world; ++rank) {
    const int position = spec.groups.PositionOf(rank);
    const std::vector<int> group = spec.groups.ShardGroupOf(rank);
    Check(position >= 0 && position < group_size &&
              static_cast<int>(group.size()) == group_size &&
              group[position] == rank,
          absl::StrCat("rank ", rank, " is not at its position ", position));
    const std::vector<int> replicas = spec.groups.ReplicasOf(rank);
    Check(static_cast<int>(replicas.size()) == world / group_size,
          absl::StrCat("rank ", rank, " has ", replicas.size(), " replicas"));
  }
}

void CheckUnitLayout(const FlatParamLayout& layout, int group_size,
                     const std::string& unit) {
  Check(layout.group_size() == group_size,
        absl::StrCat("unit '", unit, "' laid out for ", layout.group_size()));
  Check(layout.unpadded_numel() <= layout.padded_numel(),
        absl::StrCat("unit '", unit, "' pads to less than it holds"));
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const summon::core::FlatParamEntry& param = layout.params()[p];
    Check(param.flat_offset >= 0 &&
              param.flat_offset + param.numel <= layout.unpadded_numel(),
          absl::StrCat("'", param.fqn, "' lies outside its flat parameter"));
    int64_t owned = 0;
    for (int position = 0; position < group_size; ++position) {
      const summon::core::ShardSlice slice =
          layout.SliceOf(static_cast<int>(p), position);
      if (!slice.in_shard) continue;
      Check(slice.offset_in_shard >= 0 && slice.numel_in_shard > 0 &&
                slice.offset_in_shard + slice.numel_in_shard <=
                    layout.chunk_numel(),
            absl::StrCat("'", param.fqn, "' overflows position ", position));
      owned += slice.numel_in_shard;
    }
    Check(owned == param.numel,
          absl::StrCat("'", param.fqn, "' has ", param.numel,
                       " elements but the shards own ", owned));
  }
}

void CheckSpec(const ModelSpec& spec) {
  CheckGroups(spec);
  for (size_t u = 0; u < spec.units.size(); ++u) {
    const summon::core::UnitSpec& unit = spec.units[u];
    Check(unit.parent < static_cast<int>(u),
          absl::StrCat("unit '", unit.fqn, "' listed before its parent"));
    CheckUnitLayout(unit.layout, spec.groups.group_size, unit.fqn);
    for (const summon::core::FlatParamEntry& param : unit.layout.params()) {
      const absl::StatusOr<summon::core::ParamLocation> found =
          spec.FindParam(param.fqn);
      Check(found.ok() && spec.Param(*found).fqn == param.fqn,
            absl::StrCat("'", param.fqn, "' does not resolve to itself"));
    }
  }
  for (const auto& [alias, primary] : spec.aliases) {
    const absl::StatusOr<summon::core::ParamLocation> found =
        spec.FindParam(alias);
    Check(found.ok() && spec.Param(*found).fqn == primary,
          absl::StrCat("alias '", alias, "' does not resolve to ", primary));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  summon::core::Topology topology;
  topology.nodes = 1 + data[0] % 4;
  topology.local_ranks = 1 + data[1] % 8;
  std::optional<Strategy> strategy_override;
  if (data[2] % (kStrategyCount + 1) != 0) {
    strategy_override = kStrategies[data[2] % (kStrategyCount + 1) - 1];
  }
  const absl::string_view json(reinterpret_cast<const char*>(data) + 3,
                               size - 3);
  const absl::StatusOr<ModelSpec> spec =
      summon::core::ParseModelLayout(json, topology, strategy_override);
  if (spec.ok()) CheckSpec(*spec);
  return 0;
}
