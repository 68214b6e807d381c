#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace summon::core {
namespace {

TEST(DTypeTest, ParsesLayoutAndSafetensorsNames) {
  EXPECT_EQ(ParseDType("float32").value(), DType::kFloat32);
  EXPECT_EQ(ParseDType("BF16").value(), DType::kBFloat16);
  EXPECT_EQ(ParseDType("int64").value(), DType::kInt64);
  EXPECT_EQ(DTypeName(DType::kFloat16), "float16");
  EXPECT_EQ(SafetensorsDTypeName(DType::kBFloat16), "BF16");
}

TEST(DTypeTest, UnknownNameIsInvalidArgumentNamingIt) {
  auto parsed = ParseDType("float8");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("float8"), std::string::npos);
}

TEST(DTypeTest, ElementSizes) {
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DType::kFloat64), 8u);
  EXPECT_EQ(ElementSize(DType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kBool), 1u);
}

TEST(DTypeTest, R14_IntegerAndBoolParametersCannotBeFlattened) {
  EXPECT_TRUE(CheckFlattenable("w", DType::kBFloat16).ok());
  for (DType dtype : {DType::kInt8, DType::kUInt8, DType::kInt16,
                      DType::kInt32, DType::kInt64, DType::kBool}) {
    absl::Status status = CheckFlattenable("layers.0.mask", dtype);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << DTypeName(dtype);
    EXPECT_NE(status.message().find("layers.0.mask"), std::string::npos);
  }
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between odd 1+2^-7 and even 1+2^-6: rounds up.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(BFloat16ToFloat(0xC000), -2.0f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(
      FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, HalfRoundTripsAndRounds) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // Rounds to infinity.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // Smallest subnormal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // Tie to even: 0.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // Tie: even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  for (uint32_t bits = 0; bits < 0x7C00; ++bits) {
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(bits))), bits)
        << "half bits " << bits;
  }
}

TEST(DTypeTest, ConvertElementsBetweenFloatTypes) {
  const float src[3] = {0.5f, -1.25f, 3.0f};
  uint16_t bf16[3];
  ASSERT_TRUE(
      ConvertElements(DType::kFloat32, src, DType::kBFloat16, bf16, 3).ok());
  double back[3];
  ASSERT_TRUE(
      ConvertElements(DType::kBFloat16, bf16, DType::kFloat64, back, 3).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], src[i]) << "index " << i;
  int32_t ints[1] = {1};
  EXPECT_EQ(ConvertElements(DType::kInt32, ints, DType::kFloat32, back, 1)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DTypeTest, NumElementsValidatesShape) {
  EXPECT_EQ(NumElements({5, 7}).value(), 35);
  EXPECT_EQ(NumElements({}).value(), 1);
  EXPECT_EQ(NumElements({3, 0}).value(), 0);
  EXPECT_EQ(NumElements({-1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NumElements({1LL << 40, 1LL << 40}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::core
