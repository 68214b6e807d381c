#include "client/cli/cli_values.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "summon/v1/types.pb.h"

namespace summon::client {
namespace {

TEST(CliValuesTest, ParseNumberChecksSyntaxAndRange) {
  EXPECT_EQ(ParseNumber<int32_t>("RANK", "12").value(), 12);
  EXPECT_EQ(ParseNumber<int64_t>("--step", "-3").value(), -3);
  EXPECT_EQ(ParseNumber<uint32_t>("--lease", "4294967295").value(),
            4294967295u);
  EXPECT_EQ(ParseNumber<uint32_t>("--lease", "4294967296").status(),
            absl::InvalidArgumentError(
                "--lease: '4294967296' is not a valid number"));
  EXPECT_EQ(ParseNumber<uint32_t>("--lease", "-1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNumber<int32_t>("RANK", "1x").status(),
            absl::InvalidArgumentError("RANK: '1x' is not a valid number"));
  EXPECT_EQ(ParseNumber<int32_t>("RANK", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CliValuesTest, EnumsParseByLabelInAnyCase) {
  EXPECT_EQ(ParseEnum<v1::ShardingStrategy>("--strategy", "full_shard").value(),
            v1::SHARDING_STRATEGY_FULL_SHARD);
  EXPECT_EQ(ParseEnum<v1::ShardingStrategy>("--strategy", "HYBRID_SHARD_ZERO2")
                .value(),
            v1::SHARDING_STRATEGY_HYBRID_SHARD_ZERO2);
  EXPECT_EQ(ParseEnum<v1::DType>("--dtype", "bfloat16").value(),
            v1::DTYPE_BFLOAT16);
  EXPECT_EQ(ParseEnum<v1::TrainingPhase>("PHASE", "Backward").value(),
            v1::TRAINING_PHASE_BACKWARD);
}

TEST(CliValuesTest, UnknownEnumLabelsListTheChoices) {
  EXPECT_EQ(ParseEnum<v1::TrainingPhase>("PHASE", "warmup").status(),
            absl::InvalidArgumentError(
                "PHASE: unknown value 'warmup' (one of idle, forward, "
                "between, backward, optimizer)"));
  // The UNSPECIFIED value is not a choice, by label or by full name.
  EXPECT_FALSE(ParseEnum<v1::DType>("--dtype", "unspecified").ok());
  EXPECT_FALSE(ParseEnum<v1::DType>("--dtype", "DTYPE_FLOAT32").ok());
}

TEST(CliValuesTest, EnumLabelsDropThePrefix) {
  EXPECT_EQ(EnumLabel(v1::SHARDING_STRATEGY_NO_SHARD), "NO_SHARD");
  EXPECT_EQ(EnumLabel(v1::DTYPE_FLOAT16), "FLOAT16");
  EXPECT_EQ(EnumLabel(v1::TRAINING_PHASE_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_EQ(EnumLabel(static_cast<v1::DType>(77)), "77");
}

TEST(CliValuesTest, InitMethods) {
  absl::StatusOr<v1::InitMethod> zeros = ParseInitMethod("--init", "zeros");
  ASSERT_TRUE(zeros.ok());
  EXPECT_TRUE(zeros->has_zeros());
  absl::StatusOr<v1::InitMethod> seeded =
      ParseInitMethod("--init", "seeded:18446744073709551615");
  ASSERT_TRUE(seeded.ok());
  EXPECT_EQ(seeded->seeded().seed(), 18446744073709551615u);
  EXPECT_EQ(ParseInitMethod("--init", "random").status(),
            absl::InvalidArgumentError(
                "--init: 'random' is none of 'zeros', 'seeded:SEED' and "
                "'external'"));
  EXPECT_EQ(ParseInitMethod("--init", "seeded:").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseInitMethod("--init", "seeded:-1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CliValuesTest, Lists) {
  EXPECT_EQ(ParseList("--params", "a.w,b.w").value(),
            std::vector<std::string>({"a.w", "b.w"}));
  EXPECT_EQ(ParseList("--wrap", "").value(), std::vector<std::string>());
  EXPECT_EQ(ParseList("--params", "a,,b").status(),
            absl::InvalidArgumentError("--params: empty item in 'a,,b'"));
  EXPECT_EQ(ParseRankList("--grad-ranks", "0,3").value(),
            std::vector<int32_t>({0, 3}));
  EXPECT_EQ(ParseRankList("--grad-ranks", "all").value(),
            std::vector<int32_t>());
  EXPECT_EQ(ParseRankList("--grad-ranks", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ParseRankList("--grad-ranks", "0,x").status(),
      absl::InvalidArgumentError("--grad-ranks: 'x' is not a valid number"));
}

}  // namespace
}  // namespace summon::client
