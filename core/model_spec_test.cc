#include "core/model_spec.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace summon::core {
namespace {

// Embedding, two transformer blocks as units, a final norm and an LM head
// tied to the embedding. Root flat param: embed.w (40) + norm.w (3) = 43.
constexpr char kGptLayout[] = R"({
  "strategy": "FULL_SHARD",
  "use_orig_params": true,
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "norm.w", "shape": [3], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [4, 4], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [4, 8], "dtype": "float32"}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.attn.w", "shape": [4, 4], "dtype": "float32"},
      {"fqn": "layers.1.mlp.w", "shape": [4, 8], "dtype": "float32"}]}
  ]
})";

constexpr Topology kTwoByTwo{2, 2};

::testing::AssertionResult Mentions(const absl::Status& status,
                                    absl::string_view text) {
  if (status.message().find(text) != absl::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "'" << status.message() << "' does not mention '" << text << "'";
}

ModelSpec ParseOk(absl::string_view json, const Topology& topology,
                  std::optional<Strategy> strategy = std::nullopt) {
  absl::StatusOr<ModelSpec> spec = ParseModelLayout(json, topology, strategy);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec();
}

TEST(StrategyTest, ParsesAndNamesEveryFsdpSpelling) {
  const std::vector<std::pair<const char*, Strategy>> spellings = {
      {"FULL_SHARD", Strategy::kFullShard},
      {"SHARD_GRAD_OP", Strategy::kShardGradOp},
      {"NO_SHARD", Strategy::kNoShard},
      {"HYBRID_SHARD", Strategy::kHybridShard},
      {"_HYBRID_SHARD_ZERO2", Strategy::kHybridShardZero2},
  };
  for (const auto& [name, strategy] : spellings) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, strategy) << name;
    EXPECT_EQ(StrategyName(strategy), name);
  }
}

TEST(StrategyTest, UnknownStrategyIsInvalidArgumentListingKnownOnes) {
  absl::StatusOr<Strategy> parsed = ParseStrategy("full_shard");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(parsed.status(), "'full_shard'"));
  EXPECT_TRUE(Mentions(parsed.status(), "_HYBRID_SHARD_ZERO2"));
  EXPECT_TRUE(Mentions(parsed.status(), "NO_SHARD"));
}

TEST(StrategyTest, R4_OnlyZero2StrategiesKeepUnshardedBetweenFwdAndBwd) {
  EXPECT_FALSE(KeepsUnshardedBetweenForwardAndBackward(Strategy::kFullShard));
  EXPECT_TRUE(KeepsUnshardedBetweenForwardAndBackward(Strategy::kShardGradOp));
  EXPECT_FALSE(KeepsUnshardedBetweenForwardAndBackward(Strategy::kNoShard));
  EXPECT_FALSE(KeepsUnshardedBetweenForwardAndBackward(Strategy::kHybridShard));
  EXPECT_TRUE(
      KeepsUnshardedBetweenForwardAndBackward(Strategy::kHybridShardZero2));
}

TEST(IsUnderModuleTest, ModulePrefixMatchesWholeComponentsOnly) {
  EXPECT_TRUE(IsUnderModule("layers.0.w", ""));
  EXPECT_TRUE(IsUnderModule("", ""));
  EXPECT_TRUE(IsUnderModule("layers.1", "layers.1"));
  EXPECT_TRUE(IsUnderModule("layers.1.w", "layers.1"));
  EXPECT_TRUE(IsUnderModule("layers.1.mlp.w", "layers"));
  EXPECT_FALSE(IsUnderModule("layers.10.w", "layers.1"));
  EXPECT_FALSE(IsUnderModule("layers", "layers.1"));
  EXPECT_FALSE(IsUnderModule("layersX.w", "layers"));
  EXPECT_FALSE(IsUnderModule("", "layers"));
}

// Expected groups of every rank of a 2-node x 2-local-rank cluster.
struct GroupCase {
  Strategy strategy;
  Strategy effective;
  int group_size;
  std::vector<int> positions;
  std::vector<std::vector<int>> shard_groups;
  std::vector<std::vector<int>> replicas;
  int64_t root_chunk;  // c of the 43-element root unit.
};

TEST(ShardGroupsTest, GptLayoutOnTwoNodesUnderEveryStrategy) {
  const std::vector<int> all = {0, 1, 2, 3};
  const std::vector<GroupCase> cases = {
      {Strategy::kFullShard,
       Strategy::kFullShard,
       4,
       {0, 1, 2, 3},
       {all, all, all, all},
       {{0}, {1}, {2}, {3}},
       11},
      {Strategy::kShardGradOp,
       Strategy::kShardGradOp,
       4,
       {0, 1, 2, 3},
       {all, all, all, all},
       {{0}, {1}, {2}, {3}},
       11},
      {Strategy::kNoShard,
       Strategy::kNoShard,
       1,
       {0, 0, 0, 0},
       {{0}, {1}, {2}, {3}},
       {all, all, all, all},
       44},  // 43 padded to W = 4: FSDP keeps the world's process group.
      {Strategy::kHybridShard,
       Strategy::kHybridShard,
       2,
       {0, 1, 0, 1},
       {{0, 1}, {0, 1}, {2, 3}, {2, 3}},
       {{0, 2}, {1, 3}, {0, 2}, {1, 3}},
       22},
      {Strategy::kHybridShardZero2,
       Strategy::kHybridShardZero2,
       2,
       {0, 1, 0, 1},
       {{0, 1}, {0, 1}, {2, 3}, {2, 3}},
       {{0, 2}, {1, 3}, {0, 2}, {1, 3}},
       22},
  };
  for (const GroupCase& c : cases) {
    const std::string name(StrategyName(c.strategy));
    ModelSpec spec = ParseOk(kGptLayout, kTwoByTwo, c.strategy);
    EXPECT_EQ(spec.strategy, c.strategy) << name;
    EXPECT_EQ(spec.groups.declared, c.strategy) << name;
    EXPECT_EQ(spec.groups.effective, c.effective) << name;
    EXPECT_EQ(spec.groups.group_size, c.group_size) << name;
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_EQ(spec.groups.PositionOf(rank), c.positions[rank])
          << name << " rank " << rank;
      EXPECT_EQ(spec.groups.ShardGroupOf(rank), c.shard_groups[rank])
          << name << " rank " << rank;
      EXPECT_EQ(spec.groups.ReplicasOf(rank), c.replicas[rank])
          << name << " rank " << rank;
    }
    ASSERT_EQ(spec.units.size(), 3u) << name;
    EXPECT_EQ(spec.units[0].layout.group_size(), c.group_size) << name;
    EXPECT_EQ(spec.units[0].layout.chunk_numel(), c.root_chunk) << name;
  }
}

TEST(ShardGroupsTest, RanksOutsideTheWorldHaveNoGroup) {
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(Strategy::kHybridShard, kTwoByTwo);
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(groups->PositionOf(4), -1);
  EXPECT_EQ(groups->PositionOf(-1), -1);
  EXPECT_TRUE(groups->ShardGroupOf(4).empty());
  EXPECT_TRUE(groups->ReplicasOf(-1).empty());
}

TEST(ShardGroupsTest, R10_FullShardOnOneRankIsNoShard) {
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(Strategy::kFullShard, Topology{1, 1});
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(groups->declared, Strategy::kFullShard);
  EXPECT_EQ(groups->effective, Strategy::kNoShard);
  EXPECT_EQ(groups->group_size, 1);
  EXPECT_EQ(groups->PositionOf(0), 0);
  EXPECT_EQ(groups->ShardGroupOf(0), (std::vector<int>{0}));
  EXPECT_EQ(groups->ReplicasOf(0), (std::vector<int>{0}));
}

TEST(ShardGroupsTest, R10_HybridWithOneLocalRankIsNoShardAcrossNodes) {
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(Strategy::kHybridShard, Topology{3, 1});
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(groups->declared, Strategy::kHybridShard);
  EXPECT_EQ(groups->effective, Strategy::kNoShard);
  EXPECT_EQ(groups->group_size, 1);
  EXPECT_EQ(groups->PositionOf(2), 0);
  EXPECT_EQ(groups->ShardGroupOf(1), (std::vector<int>{1}));
  EXPECT_EQ(groups->ReplicasOf(1), (std::vector<int>{0, 1, 2}));
}

TEST(ShardGroupsTest, HybridOnOneNodeKeepsItsStrategy) {
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(Strategy::kHybridShardZero2, Topology{1, 2});
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(groups->effective, Strategy::kHybridShardZero2);
  EXPECT_EQ(groups->group_size, 2);
  EXPECT_EQ(groups->ReplicasOf(1), (std::vector<int>{1}));
}

TEST(ShardGroupsTest, InvalidTopologyIsInvalidArgument) {
  for (const Topology& topology :
       {Topology{0, 2}, Topology{2, 0}, Topology{-1, 1}, Topology{1, -3},
        Topology{65536, 65536}}) {
    absl::StatusOr<ShardGroups> groups =
        DeriveShardGroups(Strategy::kFullShard, topology);
    EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument)
        << topology.nodes << " x " << topology.local_ranks;
  }
  EXPECT_EQ(ParseModelLayout(kGptLayout, Topology{0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelSpecTest, GptLayoutUnitsParentsAndTiedHead) {
  ModelSpec spec = ParseOk(kGptLayout, kTwoByTwo);
  EXPECT_EQ(spec.strategy, Strategy::kFullShard);
  EXPECT_TRUE(spec.use_orig_params);
  EXPECT_FALSE(spec.compute_dtype.has_value());
  ASSERT_EQ(spec.units.size(), 3u);
  EXPECT_EQ(spec.units[0].fqn, "");
  EXPECT_EQ(spec.units[0].parent, -1);
  EXPECT_EQ(spec.units[1].fqn, "layers.0");
  EXPECT_EQ(spec.units[1].parent, 0);
  EXPECT_EQ(spec.units[2].fqn, "layers.1");
  EXPECT_EQ(spec.units[2].parent, 0);

  // The alias is stored once, as its primary.
  const FlatParamLayout& root = spec.units[0].layout;
  ASSERT_EQ(root.params().size(), 2u);
  EXPECT_EQ(root.params()[0].fqn, "embed.w");
  EXPECT_EQ(root.params()[1].fqn, "norm.w");
  EXPECT_EQ(root.params()[1].flat_offset, 40);
  EXPECT_EQ(root.unpadded_numel(), 44);  // 43 + end padding to G = 4.
  EXPECT_EQ(spec.units[1].layout.chunk_numel(), 12);  // 48 / 4.

  EXPECT_EQ(spec.params_by_fqn.size(), 7u);
  ASSERT_EQ(spec.params_by_fqn.count("head.w"), 1u);
  const ParamLocation head = spec.params_by_fqn.at("head.w");
  EXPECT_EQ(head.unit, 0);
  EXPECT_EQ(head.param, 0);
  EXPECT_EQ(spec.Param(head).fqn, "embed.w");
  EXPECT_EQ(spec.Param(head).shape, (Shape{10, 4}));
  EXPECT_EQ(spec.aliases.size(), 1u);
  EXPECT_EQ(spec.aliases.at("head.w"), "embed.w");

  const ParamLocation mlp1 = spec.params_by_fqn.at("layers.1.mlp.w");
  EXPECT_EQ(mlp1.unit, 2);
  EXPECT_EQ(mlp1.param, 1);
  EXPECT_EQ(spec.Param(mlp1).flat_offset, 16);
}

TEST(ModelSpecTest, FindParamAndUnitAndR11NotFound) {
  ModelSpec spec = ParseOk(kGptLayout, kTwoByTwo);
  absl::StatusOr<ParamLocation> head = spec.FindParam("head.w");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->unit, 0);
  EXPECT_EQ(head->param, 0);
  EXPECT_EQ(spec.FindUnit("").value(), 0);
  EXPECT_EQ(spec.FindUnit("layers.1").value(), 2);

  absl::StatusOr<ParamLocation> missing = spec.FindParam("layers.2.w");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(missing.status(), "layers.2.w"));
  absl::StatusOr<int> unit = spec.FindUnit("layers.2");
  EXPECT_EQ(unit.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(unit.status(), "layers.2"));
}

TEST(ModelSpecTest, ParentIsTheNearestEnclosingUnit) {
  ModelSpec spec = ParseOk(R"({"units": [
      {"fqn": "", "params": []},
      {"fqn": "layers", "params": []},
      {"fqn": "layers.1", "params": []},
      {"fqn": "layers.10", "params": []},
      {"fqn": "layers.1.mlp", "params": []},
      {"fqn": "other", "params": []}]})",
                           kTwoByTwo);
  ASSERT_EQ(spec.units.size(), 6u);
  EXPECT_EQ(spec.units[1].parent, 0);
  EXPECT_EQ(spec.units[2].parent, 1);
  EXPECT_EQ(spec.units[3].parent, 1);  // "layers.10" is not under "layers.1".
  EXPECT_EQ(spec.units[4].parent, 2);
  EXPECT_EQ(spec.units[5].parent, 0);
  EXPECT_TRUE(spec.units[4].layout.params().empty());
  EXPECT_EQ(spec.units[4].layout.chunk_numel(), 0);
}

TEST(ModelSpecTest, TopUnitsWithoutRootHaveNoParent) {
  ModelSpec spec = ParseOk(R"({"units": [
      {"fqn": "encoder", "params": []}, {"fqn": "decoder", "params": []}]})",
                           kTwoByTwo);
  ASSERT_EQ(spec.units.size(), 2u);
  EXPECT_EQ(spec.units[0].parent, -1);
  EXPECT_EQ(spec.units[1].parent, -1);
}

// Reference worked example: Linear(5, 5) weight only, W = 2.
TEST(ModelSpecTest, WorkedExampleChunkSizes) {
  constexpr char kLinear[] = R"({"use_orig_params": %s, "units": [
      {"fqn": "", "params": [
        {"fqn": "weight", "shape": [5, 5], "dtype": "float32"}]}]})";
  char json[256];
  std::snprintf(json, sizeof(json), kLinear, "true");
  ModelSpec orig = ParseOk(json, Topology{1, 2});
  ASSERT_EQ(orig.units.size(), 1u);
  EXPECT_EQ(orig.groups.group_size, 2);
  EXPECT_EQ(orig.units[0].layout.unpadded_numel(), 26);
  EXPECT_EQ(orig.units[0].layout.chunk_numel(), 13);

  std::snprintf(json, sizeof(json), kLinear, "false");
  ModelSpec flat = ParseOk(json, Topology{1, 2});
  ASSERT_EQ(flat.units.size(), 1u);
  EXPECT_FALSE(flat.use_orig_params);
  EXPECT_EQ(flat.units[0].layout.unpadded_numel(), 25);
  EXPECT_EQ(flat.units[0].layout.chunk_numel(), 13);
}

TEST(ModelSpecTest, ComputeDtypeSetsAlignment) {
  constexpr char kTwoParams[] = R"({%s "units": [{"fqn": "", "params": [
      {"fqn": "a", "shape": [3], "dtype": "float32"},
      {"fqn": "b", "shape": [2], "dtype": "float32"}]}]})";
  char json[256];
  std::snprintf(json, sizeof(json), kTwoParams, "");
  ModelSpec full = ParseOk(json, Topology{1, 1});
  ASSERT_EQ(full.units.size(), 1u);
  ASSERT_EQ(full.units[0].layout.params().size(), 2u);
  EXPECT_EQ(full.units[0].layout.params()[1].flat_offset, 4);  // 16 B / 4 B.

  std::snprintf(json, sizeof(json), kTwoParams,
                R"("compute_dtype": "bfloat16",)");
  ModelSpec mixed = ParseOk(json, Topology{1, 1});
  ASSERT_EQ(mixed.units.size(), 1u);
  ASSERT_EQ(mixed.units[0].layout.params().size(), 2u);
  ASSERT_TRUE(mixed.compute_dtype.has_value());
  EXPECT_EQ(*mixed.compute_dtype, DType::kBFloat16);
  EXPECT_EQ(mixed.units[0].layout.params()[1].flat_offset, 8);  // 16 B / 2 B.
  EXPECT_EQ(mixed.units[0].layout.dtype(), DType::kFloat32);
}

TEST(ModelSpecTest, AliasOfAnAliasResolvesToThePrimaryAcrossUnits) {
  ModelSpec spec = ParseOk(R"({"units": [
      {"fqn": "", "params": [
        {"fqn": "embed.w", "shape": [2], "dtype": "float16"},
        {"fqn": "head.w", "alias_of": "embed.w"}]},
      {"fqn": "dec", "params": [
        {"fqn": "dec.b", "shape": [1], "dtype": "float16"},
        {"fqn": "dec.out.w", "alias_of": "head.w"}]}]})",
                           kTwoByTwo);
  ASSERT_EQ(spec.units.size(), 2u);
  EXPECT_EQ(spec.aliases.at("dec.out.w"), "embed.w");
  const ParamLocation out = spec.params_by_fqn.at("dec.out.w");
  EXPECT_EQ(out.unit, 0);
  EXPECT_EQ(out.param, 0);
  EXPECT_EQ(spec.units[1].layout.params().size(), 1u);
}

struct BadLayout {
  const char* what;
  std::string json;
  const char* offender;  // Must appear in the message.
};

std::string RootUnitWith(const std::string& params) {
  return R"({"units": [{"fqn": "", "params": [)" + params + "]}]}";
}

TEST(ModelSpecTest, ValidationErrorsAreInvalidArgumentNamingTheOffender) {
  const std::vector<BadLayout> cases = {
      {"syntax", R"({"units": [})", "JSON"},
      {"not an object", "[1, 2]", "array"},
      {"units missing", "{}", "'units'"},
      {"units ill-typed", R"({"units": {}})", "'units'"},
      {"unit not an object", R"({"units": [7]})", "units[0]"},
      {"unit fqn missing", R"({"units": [{"params": []}]})", "units[0]"},
      {"unit fqn ill-typed", R"({"units": [{"fqn": 1, "params": []}]})",
       "units[0]"},
      {"unit params missing", R"({"units": [{"fqn": "blk"}]})", "'blk'"},
      {"unit fqn malformed", R"({"units": [{"fqn": "a..b", "params": []}]})",
       "'a..b'"},
      {"param not an object", RootUnitWith("3"), "params[0]"},
      {"param fqn missing", RootUnitWith(R"({"shape": [1]})"), "params[0]"},
      {"param fqn malformed",
       RootUnitWith(R"({"fqn": ".w", "shape": [1], "dtype": "float32"})"),
       "'.w'"},
      {"shape missing", RootUnitWith(R"({"fqn": "no.shape"})"), "no.shape"},
      {"shape ill-typed",
       RootUnitWith(
           R"({"fqn": "str.shape", "shape": "4", "dtype": "float32"})"),
       "str.shape"},
      {"negative dimension",
       RootUnitWith(
           R"({"fqn": "neg.w", "shape": [2, -1], "dtype": "float32"})"),
       "neg.w"},
      {"fractional dimension",
       RootUnitWith(R"({"fqn": "frac.w", "shape": [2.5], "dtype": "float32"})"),
       "frac.w"},
      {"float-typed dimension",
       RootUnitWith(R"({"fqn": "f.w", "shape": [2.0], "dtype": "float32"})"),
       "f.w"},
      {"string dimension",
       RootUnitWith(R"({"fqn": "s.w", "shape": ["2"], "dtype": "float32"})"),
       "s.w"},
      {"numel overflow",
       RootUnitWith(R"({"fqn": "huge.w", "shape": [4294967296, 4294967296],
                        "dtype": "float32"})"),
       "huge.w"},
      {"dimension beyond int64",
       RootUnitWith(R"({"fqn": "u64.w", "shape": [18446744073709551615],
                        "dtype": "float32"})"),
       "u64.w"},
      {"unit numel overflow",
       RootUnitWith(R"({"fqn": "big.a", "shape": [3, 1073741824, 1073741824],
                        "dtype": "float32"},
                       {"fqn": "big.b", "shape": [3, 1073741824, 1073741824],
                        "dtype": "float32"})"),
       "big.b"},
      {"dtype missing", RootUnitWith(R"({"fqn": "no.dtype", "shape": [1]})"),
       "no.dtype"},
      {"unknown dtype",
       RootUnitWith(R"({"fqn": "f8.w", "shape": [1], "dtype": "float8"})"),
       "float8"},
      {"R14 integer dtype",
       RootUnitWith(R"({"fqn": "mask.ids", "shape": [1], "dtype": "int64"})"),
       "mask.ids"},
      {"R14 bool dtype",
       RootUnitWith(R"({"fqn": "mask.bits", "shape": [1], "dtype": "bool"})"),
       "mask.bits"},
      {"mixed dtypes",
       RootUnitWith(R"({"fqn": "mix.a", "shape": [1], "dtype": "float32"},
                       {"fqn": "mix.b", "shape": [1], "dtype": "float64"})"),
       "mix.b"},
      {"duplicate unit",
       R"({"units": [{"fqn": "blk", "params": []},
                     {"fqn": "blk", "params": []}]})",
       "'blk'"},
      {"duplicate parameter",
       RootUnitWith(R"({"fqn": "twice.w", "shape": [1], "dtype": "float32"},
                       {"fqn": "twice.w", "shape": [1], "dtype": "float32"})"),
       "twice.w"},
      {"alias duplicating a parameter",
       RootUnitWith(R"({"fqn": "tie.w", "shape": [1], "dtype": "float32"},
                       {"fqn": "tie.w", "alias_of": "tie.w"})"),
       "tie.w"},
      {"alias of nothing",
       RootUnitWith(R"({"fqn": "head.w", "alias_of": "ghost.w"})"), "ghost.w"},
      {"alias before its primary",
       RootUnitWith(R"({"fqn": "head.w", "alias_of": "late.w"},
                       {"fqn": "late.w", "shape": [1], "dtype": "float32"})"),
       "late.w"},
      {"alias with a shape",
       RootUnitWith(R"({"fqn": "p.w", "shape": [1], "dtype": "float32"},
                       {"fqn": "shaped.alias", "alias_of": "p.w",
                        "shape": [1]})"),
       "shaped.alias"},
      {"alias_of ill-typed",
       RootUnitWith(R"({"fqn": "bad.alias", "alias_of": 3})"), "bad.alias"},
      {"unknown strategy", R"({"strategy": "ZERO3", "units": []})", "ZERO3"},
      {"strategy ill-typed", R"({"strategy": 3, "units": []})", "'strategy'"},
      {"use_orig_params ill-typed",
       R"({"use_orig_params": "yes", "units": []})", "use_orig_params"},
      {"unknown compute_dtype", R"({"compute_dtype": "fp8", "units": []})",
       "fp8"},
      {"integer compute_dtype", R"({"compute_dtype": "int8", "units": []})",
       "int8"},
      {"unit order",
       R"({"units": [{"fqn": "layers.0", "params": []},
                     {"fqn": "", "params": []}]})",
       "unit order"},
      {"param not under its unit",
       R"({"units": [{"fqn": "layers.1", "params": [
           {"fqn": "layers.10.w", "shape": [1], "dtype": "float32"}]}]})",
       "layers.10.w"},
      {"param under a deeper unit",
       R"({"units": [{"fqn": "", "params": [
           {"fqn": "layers.0.w", "shape": [1], "dtype": "float32"}]},
           {"fqn": "layers.0", "params": []}]})",
       "layers.0.w"},
  };
  for (const BadLayout& bad : cases) {
    absl::StatusOr<ModelSpec> spec = ParseModelLayout(bad.json, kTwoByTwo);
    ASSERT_FALSE(spec.ok()) << bad.what;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.what << ": " << spec.status();
    EXPECT_TRUE(Mentions(spec.status(), bad.offender)) << bad.what;
  }
}

// Fields the format does not have, and a model without units, are refused
// (issue 33: they were accepted silently), naming the field and the closest
// known one.
TEST(ModelSpecTest, UnknownFieldsAndNoUnitsAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"strategy": "FULL_SHARD", "shardgroup_size": 2, "units": [
           {"fqn": "", "params": []}]})",
       "layout: unknown field 'shardgroup_size' (did you mean "
       "'shard_group_size'?); known: strategy, kind, use_orig_params, "
       "compute_dtype, shard_group_size, units"},
      {R"({"units": [{"fqn": "", "parms": []}]})",
       "unit '': unknown field 'parms' (did you mean 'params'?); "
       "known: fqn, params"},
      {R"({"units": [{"fqn": "", "params": [
           {"fqn": "w", "shape": [2], "dtype": "float32", "dims": 1}]}]})",
       "parameter 'w': unknown field 'dims'; known: fqn, shape, dtype, "
       "alias_of, shard_dim"},
      {R"({"units": []})",
       "layout: units lists no unit (a model has at least one, e.g. the root "
       "unit \"\" holding every parameter)"},
  };
  for (const auto& [json, message] : cases) {
    absl::StatusOr<ModelSpec> spec = ParseModelLayout(json, kTwoByTwo);
    EXPECT_EQ(spec.status(), absl::InvalidArgumentError(message)) << json;
  }
}

TEST(ModelSpecTest, UnitOrderErrorNamesBothUnits) {
  absl::StatusOr<ModelSpec> spec =
      ParseModelLayout(R"({"units": [{"fqn": "a.b", "params": []},
                                     {"fqn": "a", "params": []}]})",
                       kTwoByTwo);
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(Mentions(spec.status(), "'a.b'"));
  EXPECT_TRUE(Mentions(spec.status(), "'a'"));
}

TEST(ModelSpecTest, OverrideReplacesTheFileStrategy) {
  ModelSpec spec = ParseOk(kGptLayout, kTwoByTwo, Strategy::kHybridShard);
  EXPECT_EQ(spec.strategy, Strategy::kHybridShard);
  EXPECT_EQ(spec.groups.group_size, 2);
}

TEST(ModelSpecTest, EveryTruncatedPrefixIsRefused) {
  const std::string json = kGptLayout;
  for (size_t length = 0; length < json.size(); ++length) {
    absl::StatusOr<ModelSpec> spec =
        ParseModelLayout(absl::string_view(json).substr(0, length), kTwoByTwo);
    ASSERT_FALSE(spec.ok()) << "prefix of " << length;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
        << "prefix of " << length;
  }
}

// Single-character corruptions produce type confusion (a string where an
// object was, an unbalanced bracket, a number for a name) at every position;
// each must come back as a status, never a throw or a crash.
TEST(ModelSpecTest, CorruptedDocumentsReturnAStatus) {
  const std::string json = kGptLayout;
  int refused = 0;
  for (size_t i = 0; i < json.size(); ++i) {
    for (char replacement : {'"', '1', '[', '{', '}', ':', '-', 'x', '\0'}) {
      std::string corrupted = json;
      corrupted[i] = replacement;
      absl::StatusOr<ModelSpec> spec = ParseModelLayout(corrupted, kTwoByTwo);
      if (spec.ok()) continue;
      ++refused;
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
          << "byte " << i << " := " << static_cast<int>(replacement);
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(ModelSpecTest, DeeplyNestedDocumentIsRefusedWithoutOverflow) {
  const std::string nested =
      std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(ParseModelLayout(nested, kTwoByTwo).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::core
