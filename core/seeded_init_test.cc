#include "core/seeded_init.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace summon::core {
namespace {

// Published reference values of the two building blocks.
TEST(SeededInitTest, Fnv1a64MatchesReferenceVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xCBF29CE484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xAF63DC4C8601EC8CULL);
}

TEST(SeededInitTest, SplitMix64IncludesTheGoldenIncrement) {
  // The first output of the reference SplitMix64 generator seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFULL);
}

struct Vector {
  const char* fqn;
  uint64_t seed;
  float expected[4];
};

// The test vectors of docs/design.md#seeded-init, float32, element 0..3.
constexpr Vector kVectors[] = {
    {"layers.0.w",
     0,
     {0.38615572452545166f, 0.011746108531951904f, 0.2129470705986023f,
      0.4548804759979248f}},
    {"layers.0.w",
     7,
     {0.02711927890777588f, -0.38744521141052246f, -0.42704129219055176f,
      -0.14424341917037964f}},
    {"embed.weight",
     42,
     {0.11831808090209961f, 0.1768174171447754f, 0.42246174812316895f,
      -0.04044902324676514f}},
};

TEST(SeededInitTest, Float32MatchesDesignVectorsExactly) {
  for (const Vector& vector : kVectors) {
    float values[4];
    ASSERT_TRUE(
        FillSeeded(vector.fqn, vector.seed, DType::kFloat32, 0, 4, values)
            .ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(values[i], vector.expected[i])
          << vector.fqn << " seed " << vector.seed << " element " << i;
    }
  }
}

TEST(SeededInitTest, Float64AndSeededValueAreTheFloat32ValuesExactly) {
  for (const Vector& vector : kVectors) {
    double values[4];
    ASSERT_TRUE(
        FillSeeded(vector.fqn, vector.seed, DType::kFloat64, 0, 4, values)
            .ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(values[i], static_cast<double>(vector.expected[i]))
          << vector.fqn << " seed " << vector.seed << " element " << i;
      EXPECT_EQ(SeededValue(vector.fqn, vector.seed, i),
                static_cast<double>(vector.expected[i]))
          << vector.fqn << " seed " << vector.seed << " element " << i;
    }
  }
}

TEST(SeededInitTest, SubRangeEqualsTheSameElementsOfAWholeFill) {
  constexpr int64_t kNumel = 1000;
  std::vector<float> whole(kNumel);
  ASSERT_TRUE(
      FillSeeded("layers.3.mlp.w", 5, DType::kFloat32, 0, kNumel, whole.data())
          .ok());
  // A rank owning chunk [337, 674) fills only its slice.
  constexpr int64_t kFirst = 337;
  constexpr int64_t kCount = 337;
  std::vector<float> slice(kCount);
  ASSERT_TRUE(FillSeeded("layers.3.mlp.w", 5, DType::kFloat32, kFirst, kCount,
                         slice.data())
                  .ok());
  for (int64_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(slice[i], whole[kFirst + i]) << "element " << kFirst + i;
  }
}

TEST(SeededInitTest, ValuesLieInHalfOpenUnitIntervalCentredOnZero) {
  std::vector<double> values(4096);
  ASSERT_TRUE(FillSeeded("embed.weight", 1, DType::kFloat64, 0,
                         static_cast<int64_t>(values.size()), values.data())
                  .ok());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_GE(values[i], -0.5) << "element " << i;
    EXPECT_LT(values[i], 0.5) << "element " << i;
    // A multiple of 2^-24: exact in float32.
    EXPECT_EQ(static_cast<double>(static_cast<float>(values[i])), values[i])
        << "element " << i;
  }
}

TEST(SeededInitTest, DifferentParametersAndSeedsGiveDifferentStreams) {
  EXPECT_NE(SeededStreamKey("layers.0.w", 0), SeededStreamKey("layers.1.w", 0));
  EXPECT_NE(SeededStreamKey("layers.0.w", 0), SeededStreamKey("layers.0.w", 1));
}

// layers.0.w seed 0 element 0 is 0.38615572452545166 (float32 0x3EC5B634).
// Both half formats round it up, so truncation would give a different answer.
TEST(SeededInitTest, BFloat16RoundsTheFloat32ValueToNearestEven) {
  uint16_t value;
  ASSERT_TRUE(FillSeeded("layers.0.w", 0, DType::kBFloat16, 0, 1, &value).ok());
  EXPECT_EQ(value, 0x3EC6);  // Truncation: 0x3EC5.
  EXPECT_EQ(BFloat16ToFloat(value), 0.38671875f);
}

TEST(SeededInitTest, Float16RoundsTheFloat32ValueToNearestEven) {
  uint16_t value;
  ASSERT_TRUE(FillSeeded("layers.0.w", 0, DType::kFloat16, 0, 1, &value).ok());
  EXPECT_EQ(value, 0x362E);  // Truncation: 0x362D.
  EXPECT_EQ(HalfToFloat(value), 0.38623046875f);
}

TEST(SeededInitTest, NonFloatingDTypeIsInvalidArgument) {
  int32_t value = 0;
  absl::Status status =
      FillSeeded("layers.0.mask", 0, DType::kInt32, 0, 1, &value);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("layers.0.mask"), std::string::npos);
  EXPECT_NE(status.message().find("int32"), std::string::npos);
}

TEST(SeededInitTest, NegativeRangeIsInvalidArgument) {
  float value;
  EXPECT_EQ(FillSeeded("w", 0, DType::kFloat32, -1, 1, &value).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillSeeded("w", 0, DType::kFloat32, 0, -1, &value).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::core
