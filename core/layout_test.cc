#include "core/layout.h"

#include "gtest/gtest.h"

namespace summon::core {
namespace {

FlatParamLayout BuildOrDie(const std::vector<FlatParamInput>& params,
                           bool use_orig_params, int group_size,
                           std::optional<DType> compute_dtype = std::nullopt) {
  absl::StatusOr<FlatParamLayout> layout = FlatParamLayout::Build(
      params, use_orig_params, group_size, compute_dtype);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(FlatParamLayout());
}

void ExpectSlice(const ShardSlice& slice, int64_t intra_start,
                 int64_t intra_end, int64_t offset_in_shard) {
  EXPECT_TRUE(slice.in_shard);
  EXPECT_EQ(slice.intra_start, intra_start);
  EXPECT_EQ(slice.intra_end, intra_end);
  EXPECT_EQ(slice.offset_in_shard, offset_in_shard);
  EXPECT_EQ(slice.numel_in_shard, intra_end - intra_start + 1);
}

// Reference 1.3: Linear(5,5,bias=False), W=2, orig-params: 25 -> 26, c=13.
TEST(FlatParamLayoutTest, Linear5x5NoBiasSplits13And13) {
  FlatParamLayout layout =
      BuildOrDie({{"weight", {5, 5}, DType::kFloat32}}, true, 2);
  EXPECT_EQ(layout.unpadded_numel(), 26);
  EXPECT_EQ(layout.chunk_numel(), 13);
  EXPECT_EQ(layout.padded_numel(), 26);
  ExpectSlice(layout.SliceOf(0, 0), 0, 12, 0);
  ExpectSlice(layout.SliceOf(0, 1), 13, 24, 0);
  EXPECT_EQ(layout.RealEnd(1) - layout.RealBegin(1), 13);  // 12 + end pad.
}

// Reference 1.3: Linear(5,7): weight 35, pad 1, bias 7 = 43 -> 44, c=22; the
// bias lies wholly on rank 1 at offset 14.
TEST(FlatParamLayoutTest, Linear5x7BiasWhollyOnRank1) {
  FlatParamLayout layout = BuildOrDie(
      {{"weight", {7, 5}, DType::kFloat32}, {"bias", {7}, DType::kFloat32}},
      true, 2);
  EXPECT_EQ(layout.unpadded_numel(), 44);
  EXPECT_EQ(layout.chunk_numel(), 22);
  EXPECT_EQ(layout.params()[1].flat_offset, 36);
  ExpectSlice(layout.SliceOf(0, 0), 0, 21, 0);
  EXPECT_FALSE(layout.SliceOf(1, 0).in_shard);
  ExpectSlice(layout.SliceOf(0, 1), 22, 34, 0);
  ExpectSlice(layout.SliceOf(1, 1), 0, 6, 14);
}

// Reference 1.3: Linear(5,5)+Linear(5,7) in one unit: 25|3|5|3|35|1|7|1 = 80.
TEST(FlatParamLayoutTest, TwoLinearUnitSplits40And40) {
  FlatParamLayout layout = BuildOrDie({{"lin1.weight", {5, 5}, DType::kFloat32},
                                       {"lin1.bias", {5}, DType::kFloat32},
                                       {"lin2.weight", {7, 5}, DType::kFloat32},
                                       {"lin2.bias", {7}, DType::kFloat32}},
                                      true, 2);
  EXPECT_EQ(layout.unpadded_numel(), 80);
  EXPECT_EQ(layout.chunk_numel(), 40);
  const std::vector<int64_t> offsets = {0, 28, 36, 72};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(layout.params()[i].flat_offset, offsets[i]) << "param " << i;
  }
  // Segments: param, pad 3, param, pad 3, param, pad 1, param, pad 1.
  ASSERT_EQ(layout.segments().size(), 8u);
  EXPECT_EQ(layout.segments()[1].numel, 3);
  EXPECT_EQ(layout.segments()[1].param_index, -1);
  EXPECT_EQ(layout.segments()[7].numel, 1);
  // Rank 0: lin1.weight, lin1.bias, lin2.weight[0..3].
  ExpectSlice(layout.SliceOf(0, 0), 0, 24, 0);
  ExpectSlice(layout.SliceOf(1, 0), 0, 4, 28);
  ExpectSlice(layout.SliceOf(2, 0), 0, 3, 36);
  EXPECT_FALSE(layout.SliceOf(3, 0).in_shard);
  // Rank 1: lin2.weight[4..34], lin2.bias.
  EXPECT_FALSE(layout.SliceOf(0, 1).in_shard);
  EXPECT_FALSE(layout.SliceOf(1, 1).in_shard);
  ExpectSlice(layout.SliceOf(2, 1), 4, 34, 0);
  ExpectSlice(layout.SliceOf(3, 1), 0, 6, 32);
}

// Reference 1.3, flat-params mode (test_unshard_params_recurse numbers).
TEST(FlatParamLayoutTest, FlatParamsModeLinear5x5And5x3) {
  FlatParamLayout outer =
      BuildOrDie({{"weight", {5, 5}, DType::kFloat32}}, false, 2);
  EXPECT_EQ(outer.unpadded_numel(), 25);
  EXPECT_EQ(outer.chunk_numel(), 13);
  EXPECT_EQ(outer.padded_numel(), 26);
  EXPECT_EQ(outer.RealEnd(1) - outer.RealBegin(1), 12);  // + 1 zero pad.
  FlatParamLayout inner =
      BuildOrDie({{"weight", {3, 5}, DType::kFloat32}}, false, 2);
  EXPECT_EQ(inner.unpadded_numel(), 15);
  EXPECT_EQ(inner.chunk_numel(), 8);
  EXPECT_EQ(inner.RealEnd(1) - inner.RealBegin(1), 7);
  ExpectSlice(inner.SliceOf(0, 1), 8, 14, 0);
}

// Reference 1.2: N=1, W=2: rank 1 holds one element of pure padding.
TEST(FlatParamLayoutTest, SingletonParamLeavesRank1PurePadding) {
  for (bool use_orig_params : {false, true}) {
    FlatParamLayout layout =
        BuildOrDie({{"p", {1}, DType::kFloat32}}, use_orig_params, 2);
    EXPECT_EQ(layout.chunk_numel(), 1) << use_orig_params;
    ExpectSlice(layout.SliceOf(0, 0), 0, 0, 0);
    EXPECT_FALSE(layout.SliceOf(0, 1).in_shard) << use_orig_params;
  }
  // N=5, W=4: c=2, rank 2 = 1 real + 1 pad, rank 3 = 2 pad.
  FlatParamLayout five = BuildOrDie({{"p", {5}, DType::kFloat32}}, false, 4);
  EXPECT_EQ(five.chunk_numel(), 2);
  EXPECT_EQ(five.RealEnd(2) - five.RealBegin(2), 1);
  EXPECT_EQ(five.RealEnd(3) - five.RealBegin(3), 0);
  EXPECT_FALSE(five.SliceOf(0, 3).in_shard);
}

TEST(FlatParamLayoutTest, AlignmentFollowsComputeDtype) {
  // bf16 params: A = 8 elements. 3 | pad 5 | 4 = 12, then pad to W=8 -> 16.
  FlatParamLayout bf16 = BuildOrDie(
      {{"a", {3}, DType::kBFloat16}, {"b", {4}, DType::kBFloat16}}, true, 8);
  EXPECT_EQ(bf16.params()[1].flat_offset, 8);
  EXPECT_EQ(bf16.unpadded_numel(), 16);
  // fp32 params with a bf16 compute dtype align to 8 elements as well.
  FlatParamLayout mixed =
      BuildOrDie({{"a", {3}, DType::kFloat32}, {"b", {4}, DType::kFloat32}},
                 true, 1, DType::kBFloat16);
  EXPECT_EQ(mixed.params()[1].flat_offset, 8);
  // fp64: A = 2.
  FlatParamLayout f64 = BuildOrDie(
      {{"a", {3}, DType::kFloat64}, {"b", {4}, DType::kFloat64}}, true, 1);
  EXPECT_EQ(f64.params()[1].flat_offset, 4);
}

TEST(FlatParamLayoutTest, EveryFlatElementBelongsToExactlyOnePosition) {
  FlatParamLayout layout = BuildOrDie({{"a", {7, 3}, DType::kFloat32},
                                       {"b", {5}, DType::kFloat32},
                                       {"c", {2, 2, 2}, DType::kFloat32}},
                                      true, 3);
  for (int p = 0; p < 3; ++p) {
    int64_t covered = 0;
    int64_t next = 0;
    for (int position = 0; position < 3; ++position) {
      ShardSlice slice = layout.SliceOf(p, position);
      if (!slice.in_shard) continue;
      EXPECT_EQ(slice.intra_start, next) << "param " << p;
      next = slice.intra_end + 1;
      covered += slice.numel_in_shard;
    }
    EXPECT_EQ(covered, layout.params()[p].numel) << "param " << p;
  }
}

TEST(FlatParamLayoutTest, EmptyUnitHasNoChunk) {
  FlatParamLayout layout = BuildOrDie({}, true, 4);
  EXPECT_EQ(layout.unpadded_numel(), 0);
  EXPECT_EQ(layout.chunk_numel(), 0);
  EXPECT_EQ(layout.shard_bytes(), 0);
}

// torch 2.15 pads a use_orig_params flat parameter to its process group's
// size even under NO_SHARD (G = 1): Embedding(10, 4) + Linear(4, 3) on a
// world of 4 holds [40, 12, 3, 1 padding] = 56 on every rank.
TEST(FlatParamLayoutTest, NoShardPadsToTheProcessGroupSize) {
  const std::vector<FlatParamInput> params = {
      {"embed.weight", {10, 4}, DType::kFloat32},
      {"head.weight", {3, 4}, DType::kFloat32},
      {"head.bias", {3}, DType::kFloat32}};
  absl::StatusOr<FlatParamLayout> layout =
      FlatParamLayout::Build(params, true, 1, std::nullopt, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->unpadded_numel(), 56);
  EXPECT_EQ(layout->chunk_numel(), 56);
  ExpectSlice(layout->SliceOf(2, 0), 0, 2, 52);
  // Without orig params there is no padding at all.
  EXPECT_EQ(BuildOrDie(params, false, 1).chunk_numel(), 55);
  EXPECT_EQ(FlatParamLayout::Build(params, true, 1, std::nullopt, -1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FlatParamLayoutTest, RejectsMixedDtypesIntegersAndBadGroups) {
  EXPECT_EQ(FlatParamLayout::Build({{"a", {2}, DType::kFloat32},
                                    {"b", {2}, DType::kFloat16}},
                                   true, 2)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status r14 =
      FlatParamLayout::Build({{"steps", {1}, DType::kInt64}}, true, 2)
          .status();
  EXPECT_EQ(r14.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r14.message().find("steps"), std::string::npos);
  EXPECT_EQ(FlatParamLayout::Build({{"a", {2}, DType::kFloat32}}, true, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FlatParamLayout::Build({{"a", {1LL << 61}, DType::kFloat32},
                                    {"b", {1LL << 61}, DType::kFloat32}},
                                   true, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FlatParamLayout::Build({{"a", {-2}, DType::kFloat32}}, true, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::core
