// The layout file's "kind": "fsdp2", "shard_dim" and "shard_group_size".
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/status_testing.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

constexpr char kFsdp2Layout[] = R"({
  "kind": "fsdp2",
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.w", "shape": [5, 3], "dtype": "float32"},
      {"fqn": "layers.0.v", "shape": [2, 4], "dtype": "float32",
       "shard_dim": -1}]}
  ]
})";

ModelSpec ParseOk(absl::string_view json, const Topology& topology,
                  std::optional<Strategy> strategy = std::nullopt) {
  absl::StatusOr<ModelSpec> spec = ParseModelLayout(json, topology, strategy);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec();
}

absl::Status ParseError(const std::string& json,
                        const Topology& topology = Topology{1, 2}) {
  return ParseModelLayout(json, topology).status();
}

TEST(ModelSpecFsdp2Test, KindDefaultsToFlat) {
  ModelSpec spec = ParseOk(R"({"units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [5, 3], "dtype": "float32"}]}]})",
                           Topology{1, 2});
  EXPECT_EQ(spec.kind, LayoutKind::kFlat);
  EXPECT_EQ(spec.units[0].layout.kind(), LayoutKind::kFlat);
  EXPECT_EQ(spec.units[0].layout.chunk_numel(), 8);  // 15 -> 16 / 2.
}

TEST(ModelSpecFsdp2Test, Fsdp2UnitsChunkPerParameter) {
  ModelSpec spec = ParseOk(kFsdp2Layout, Topology{1, 2});
  EXPECT_EQ(spec.kind, LayoutKind::kFsdp2);
  const FlatParamLayout& root = spec.units[0].layout;
  EXPECT_EQ(root.kind(), LayoutKind::kFsdp2);
  EXPECT_EQ(root.chunk_numel(), 20);  // 5 rows x 4.
  const FlatParamLayout& layer = spec.units[1].layout;
  EXPECT_EQ(layer.chunk_numel(), 9 + 4);
  EXPECT_EQ(layer.params()[1].shard_dim, 1);  // -1 of a 2-d shape.
  EXPECT_EQ(spec.FindParam("head.w")->param, 0);
  EXPECT_EQ(LayoutKindName(spec.kind), "fsdp2");
}

TEST(ModelSpecFsdp2Test, StrategiesSetTheGroupSize) {
  EXPECT_EQ(ParseOk(kFsdp2Layout, Topology{2, 2}, Strategy::kShardGradOp)
                .units[1]
                .layout.group_size(),
            4);
  ModelSpec no_shard = ParseOk(kFsdp2Layout, Topology{2, 2}, Strategy::kNoShard);
  EXPECT_EQ(no_shard.units[1].layout.chunk_numel(), 15 + 8);
  EXPECT_EQ(ParseOk(kFsdp2Layout, Topology{2, 2}, Strategy::kHybridShard)
                .units[1]
                .layout.group_size(),
            2);
}

// HSDP's mesh (W / S replicate, S shard): groups of S consecutive ranks.
TEST(ModelSpecFsdp2Test, ShardGroupSizeSetsTheHsdpShardMesh) {
  std::string json = kFsdp2Layout;
  json.replace(json.find('{'), 1,
               R"({"strategy": "HYBRID_SHARD", "shard_group_size": 4,)");
  ModelSpec spec = ParseOk(json, Topology{4, 2});
  EXPECT_EQ(spec.groups.group_size, 4);
  EXPECT_EQ(spec.groups.PositionOf(5), 1);
  EXPECT_EQ(spec.groups.ShardGroupOf(5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(spec.groups.ReplicasOf(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(spec.units[1].layout.group_size(), 4);
  // The flat kind takes it too.
  ModelSpec flat = ParseOk(
      R"({"strategy": "_HYBRID_SHARD_ZERO2", "shard_group_size": 1, "units": [
        {"fqn": "", "params": [{"fqn": "w", "shape": [4], "dtype": "float32"}]}
      ]})",
      Topology{1, 4});
  EXPECT_EQ(flat.groups.group_size, 1);
  EXPECT_EQ(flat.groups.effective, Strategy::kNoShard);  // R10.
}

// FSDP1 keeps the world's process group under NO_SHARD, so a flat
// parameter's end padding is to W although G = 1 (torch 2.15 on 4 ranks:
// _numels_with_padding [40, 12, 3, 1]); FSDP2 has no end padding.
TEST(ModelSpecFsdp2Test, FlatNoShardPadsToTheWorld) {
  constexpr char kRoot[] = R"({"units": [{"fqn": "", "params": [
      {"fqn": "embed.weight", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "head.weight", "shape": [3, 4], "dtype": "float32"},
      {"fqn": "head.bias", "shape": [3], "dtype": "float32"}]}]})";
  EXPECT_EQ(ParseOk(kRoot, Topology{1, 4}, Strategy::kNoShard)
                .units[0]
                .layout.chunk_numel(),
            56);
  EXPECT_EQ(ParseOk(kRoot, Topology{2, 2}, Strategy::kHybridShard)
                .units[0]
                .layout.chunk_numel(),
            28);
  EXPECT_EQ(ParseOk(kRoot, Topology{1, 1}, Strategy::kNoShard)
                .units[0]
                .layout.chunk_numel(),
            55);
}

TEST(ModelSpecFsdp2Test, RefusalsNameTheKey) {
  const std::string units = R"("units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 3], "dtype": "float32"}]}])";
  ExpectStatus(ParseError(R"({"kind": "fsdp3", )" + units + "}"),
               absl::StatusCode::kInvalidArgument, {"'fsdp3'", "fsdp2"});
  ExpectStatus(ParseError(R"({"kind": 2, )" + units + "}"),
               absl::StatusCode::kInvalidArgument, {"'kind'"});
  ExpectStatus(
      ParseError(R"({"kind": "fsdp2", "use_orig_params": true, )" + units +
                 "}"),
      absl::StatusCode::kInvalidArgument, {"'use_orig_params'", "fsdp2"});
  ExpectStatus(ParseError(R"({"kind": "fsdp2", "compute_dtype": "bfloat16", )" +
                          units + "}"),
               absl::StatusCode::kInvalidArgument, {"'compute_dtype'"});
  ExpectStatus(
      ParseError(R"({"shard_group_size": 2, )" + units + "}"),
      absl::StatusCode::kInvalidArgument, {"shard_group_size", "FULL_SHARD"});
  ExpectStatus(ParseError(R"({"strategy": "HYBRID_SHARD",
                              "shard_group_size": 3, )" +
                          units + "}"),
               absl::StatusCode::kInvalidArgument,
               {"shard_group_size 3", "world size 2"});
  ExpectStatus(ParseError(R"({"strategy": "HYBRID_SHARD",
                              "shard_group_size": 0, )" +
                          units + "}"),
               absl::StatusCode::kInvalidArgument, {"'shard_group_size'"});
  // shard_dim: fsdp2 only, in range, even on a dim > 0, never on an alias.
  ExpectStatus(ParseError(R"({"units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 4], "dtype": "float32", "shard_dim": 1}]}]})"),
               absl::StatusCode::kInvalidArgument, {"'w'", "kind fsdp2"});
  ExpectStatus(ParseError(R"({"kind": "fsdp2", "units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 4], "dtype": "float32", "shard_dim": 2}]}]})"),
               absl::StatusCode::kInvalidArgument, {"'w'", "shard_dim 2"});
  ExpectStatus(ParseError(R"({"kind": "fsdp2", "units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 3], "dtype": "float32", "shard_dim": 1}]}]})"),
               absl::StatusCode::kInvalidArgument,
               {"'w'", "uneven sharding on dim 1"});
  ExpectStatus(ParseError(R"({"kind": "fsdp2", "units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 4], "dtype": "float32"},
      {"fqn": "v", "alias_of": "w", "shard_dim": 1}]}]})"),
               absl::StatusCode::kInvalidArgument, {"'v'", "alias"});
  ExpectStatus(ParseError(R"({"kind": "fsdp2", "units": [{"fqn": "", "params": [
      {"fqn": "w", "shape": [2, 4], "dtype": "float32", "shard_dim": "1"}]}]})"),
               absl::StatusCode::kInvalidArgument, {"'shard_dim'"});
}

}  // namespace
}  // namespace summon::core
