// Tensor access end to end: writes refused per R5 with nothing applied,
// element ranges and chunked reads, read_dtype / per-read conversion to
// bfloat16, float16 and float64 with exact bits, TensorStats with exact
// numbers, and ModelChecksum's shape.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t BitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FloatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Reference float32 -> bfloat16, round to nearest even (finite inputs).
uint16_t ToBFloat16(float value) {
  const uint32_t bits = BitsOf(value);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// Reference float32 -> float16, round to nearest even (finite inputs).
uint16_t ToFloat16(float value) {
  const uint32_t bits = BitsOf(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude >= 0x477ff000) return sign | 0x7c00;  // Rounds past 65504.
  if (magnitude < 0x38800000) {                       // Below 2^-14.
    const double units = std::fabs(static_cast<double>(value)) * 16777216.0;
    return sign | static_cast<uint16_t>(std::nearbyint(units));
  }
  return sign |
         static_cast<uint16_t>(
             (magnitude + 0xfff + ((magnitude >> 13) & 1) - 0x38000000) >> 13);
}

std::vector<uint16_t> Halves(const std::string& data) {
  std::vector<uint16_t> values(data.size() / 2);
  std::memcpy(values.data(), data.data(), values.size() * 2);
  return values;
}

// Values whose half-precision encodings are known by hand: ties to even,
// just above a tie, overflow, subnormals, signed zero, infinity.
struct Rounding {
  float value;
  uint16_t bfloat16;
  uint16_t float16;
};
const std::vector<Rounding> kRoundings = {
    {1.0f, 0x3f80, 0x3c00},
    {-2.5f, 0xc020, 0xc100},
    {FloatOf(0x3f808000), 0x3f80, 0x3c04},  // 1 + 2^-8: bf16 tie to even.
    {FloatOf(0x3f818000), 0x3f82, 0x3c0c},  // 1 + 3*2^-8: tie, rounds up.
    {FloatOf(0x3f808001), 0x3f81, 0x3c04},  // Just above the tie.
    {FloatOf(0x3f801000), 0x3f80, 0x3c00},  // 1 + 2^-11: f16 tie to even.
    {FloatOf(0x3f803000), 0x3f80, 0x3c02},  // 1 + 3*2^-11: tie, rounds up.
    {65504.0f, 0x4780, 0x7bff},             // f16 max.
    {65520.0f, 0x4780, 0x7c00},             // Rounds to f16 infinity.
    {FloatOf(0x33800000), 0x3380, 0x0001},  // 2^-24: smallest f16 subnormal.
    {FloatOf(0x33400000), 0x3340, 0x0001},  // 0.75 * 2^-24 rounds up.
    {FloatOf(0x33000000), 0x3300, 0x0000},  // 0.5 * 2^-24: tie to zero.
    {FloatOf(0x38800000), 0x3880, 0x0400},  // 2^-14: smallest f16 normal.
    {-0.0f, 0x8000, 0x8000},
    {kInf, 0x7f80, 0x7c00},
};

class TensorIoTest : public SummondTest {
 protected:
  grpc::Status Stats(const std::string& session,
                     const std::vector<std::string>& fqns,
                     std::optional<uint32_t> bins,
                     pb::TensorStatsResponse* response) {
    pb::TensorStatsRequest request;
    request.set_session_id(session);
    for (const std::string& fqn : fqns) request.add_fqns(fqn);
    if (bins.has_value()) request.set_histogram_bins(*bins);
    grpc::ClientContext context;
    return summon_->TensorStats(&context, request, response);
  }

  pb::ReadTensorRequest ReadRequest(const std::string& session,
                                    const std::string& fqn, pb::DType dtype) {
    pb::ReadTensorRequest request;
    request.set_session_id(session);
    request.set_fqn(fqn);
    request.set_dtype(dtype);
    return request;
  }
};

TEST_F(TensorIoTest, WritesThatDoNotFitTheTensorAreRefusedAndApplyNothing) {
  StartServer(4);
  const pb::Model model = CreateSeeded("m");
  const pb::Session session = Open("m");
  const std::vector<float> five = {1, 2, 3, 4, 5};
  pb::WriteTensorHeader header;
  header.set_session_id(session.id());
  header.set_fqn("layers.1.w");
  header.set_dtype(pb::DTYPE_FLOAT64);
  header.set_element_count(1);
  EXPECT_CODE(Write(header, {std::string(8, '\0')}), INVALID_ARGUMENT);
  header.set_dtype(pb::DTYPE_BFLOAT16);
  EXPECT_CODE(Write(header, {std::string(2, '\0')}), INVALID_ARGUMENT);
  EXPECT_CODE(WriteFloats(session.id(), "layers.1.w", five, false, 31),
              OUT_OF_RANGE);
  EXPECT_CODE(WriteFloats(session.id(), "layers.1.w", five, false, 35),
              OUT_OF_RANGE);
  EXPECT_CODE(WriteFloats(session.id(), "layers.1.w", five, false, -1),
              OUT_OF_RANGE);
  EXPECT_CODE(WriteFloats(session.id(), "layers.9.w", five), NOT_FOUND);
  EXPECT_CODE(WriteFloats(session.id(), "layers.1.w", five, /*grad=*/true),
              NOT_FOUND);
  EXPECT_EQ(Read(session.id(), "layers.1.w"), Seeded("layers.1.w", 35));

  // A write that fits lands exactly on its range.
  ASSERT_TRUE(WriteFloats(session.id(), "layers.1.w", five, false, 30).ok());
  TensorValues expected = SeededBlocks();
  std::copy(five.begin(), five.end(), expected["layers.1.w"].begin() + 30);
  EXPECT_EQ(Read(session.id(), "layers.1.w"), expected["layers.1.w"]);
  Close(session.id());
  EXPECT_EQ(ParamChecksums(Checksum("m")), ExpectedChecksums(model, expected));
}

TEST_F(TensorIoTest, ElementRangesStreamInChunksWithTheirOffsets) {
  StartServer(2);
  CreateSeeded("big", pb::SHARDING_STRATEGY_FULL_SHARD, R"({"units": [
    {"fqn": "", "params": [{"fqn": "w", "shape": [3000], "dtype": "float32"}]}
  ]})");
  const pb::Session session = Open("big", ReadOnly());
  const std::vector<float> all = Seeded("w", 3000);
  pb::ReadTensorRequest request =
      ReadRequest(session.id(), "w", pb::DTYPE_UNSPECIFIED);
  request.set_element_offset(100);
  request.set_element_count(2500);
  request.set_chunk_bytes(4096);
  grpc::ClientContext context;
  auto reader = summon_->ReadTensor(&context, request);
  pb::ReadTensorResponse chunk;
  std::vector<int64_t> offsets;
  std::vector<float> values;
  while (reader->Read(&chunk)) {
    if (offsets.empty()) {
      EXPECT_EQ(chunk.info().fqn(), "w");
      EXPECT_EQ(chunk.info().dtype(), pb::DTYPE_FLOAT32);
      EXPECT_EQ(chunk.info().numel(), 3000);
    } else {
      EXPECT_FALSE(chunk.has_info());
    }
    offsets.push_back(chunk.element_offset());
    const size_t old = values.size();
    values.resize(old + chunk.data().size() / 4);
    std::memcpy(values.data() + old, chunk.data().data(), chunk.data().size());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{100, 1124, 2148}));
  EXPECT_EQ(values, std::vector<float>(all.begin() + 100, all.begin() + 2600));
}

TEST_F(TensorIoTest, ReadsConvertToHalfPrecisionWithExactRounding) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session writer = Open("m", ModuleScope("layers.1"));
  std::vector<float> stored = Seeded("layers.1.w", 35);
  for (size_t i = 0; i < kRoundings.size(); ++i) {
    stored[i] = kRoundings[i].value;
  }
  ASSERT_TRUE(WriteFloats(writer.id(), "layers.1.w", stored).ok());
  Close(writer.id());

  pb::SessionOptions options = ReadOnly();
  options.set_read_dtype(pb::DTYPE_BFLOAT16);
  const pb::Session session = Open("m", options);
  EXPECT_EQ(session.options().read_dtype(), pb::DTYPE_BFLOAT16);
  // Session info keeps the stored dtype; reads convert.
  EXPECT_EQ(session.params(5).dtype(), pb::DTYPE_FLOAT32);
  for (pb::DType dtype : {pb::DTYPE_UNSPECIFIED, pb::DTYPE_FLOAT16}) {
    SCOPED_TRACE(pb::DType_Name(dtype));
    std::string data;
    pb::TensorInfo info;
    ASSERT_TRUE(
        ReadRaw(ReadRequest(session.id(), "layers.1.w", dtype), &data, &info)
            .ok());
    const bool bf16 = dtype == pb::DTYPE_UNSPECIFIED;
    EXPECT_EQ(info.dtype(), bf16 ? pb::DTYPE_BFLOAT16 : pb::DTYPE_FLOAT16);
    const std::vector<uint16_t> halves = Halves(data);
    ASSERT_EQ(halves.size(), 35u);
    for (size_t i = 0; i < halves.size(); ++i) {
      const uint16_t expected =
          i < kRoundings.size()
              ? (bf16 ? kRoundings[i].bfloat16 : kRoundings[i].float16)
              : (bf16 ? ToBFloat16(stored[i]) : ToFloat16(stored[i]));
      EXPECT_EQ(halves[i], expected) << "element " << i << " " << stored[i];
    }
  }
  // float32 and float64 reads give the stored values exactly.
  EXPECT_EQ(Read(session.id(), "layers.1.w"), stored);
  std::string data;
  ASSERT_TRUE(
      ReadRaw(ReadRequest(session.id(), "layers.1.w", pb::DTYPE_FLOAT64), &data)
          .ok());
  ASSERT_EQ(data.size(), 35u * 8);
  for (size_t i = 0; i < 35; ++i) {
    double value;
    std::memcpy(&value, data.data() + i * 8, 8);
    EXPECT_EQ(value, static_cast<double>(stored[i])) << "element " << i;
  }
}

TEST_F(TensorIoTest, StatsOfAKnownTensorAreExact) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  ASSERT_TRUE(WriteFloats(session.id(), "norm.w",
                          {-3, -1, 0, 0, 1, 2, 5, kNaN, kInf, -kInf})
                  .ok());
  pb::TensorStatsResponse response;
  ASSERT_TRUE(Stats(session.id(), {"norm.w"}, 4, &response).ok());
  ASSERT_EQ(response.tensors_size(), 1);
  const pb::TensorStats& stats = response.tensors(0);
  EXPECT_EQ(stats.info().fqn(), "norm.w");
  EXPECT_EQ(stats.info().numel(), 10);
  EXPECT_EQ(stats.min(), -3.0);
  EXPECT_EQ(stats.max(), 5.0);
  EXPECT_EQ(stats.mean(), 4.0 / 7.0);
  EXPECT_EQ(stats.l2_norm(), std::sqrt(40.0));
  EXPECT_EQ(stats.nan_count(), 1);
  EXPECT_EQ(stats.inf_count(), 2);
  EXPECT_EQ(stats.histogram().lower(), -3.0);
  EXPECT_EQ(stats.histogram().upper(), 5.0);
  EXPECT_EQ(std::vector<int64_t>(stats.histogram().counts().begin(),
                                 stats.histogram().counts().end()),
            (std::vector<int64_t>{1, 3, 2, 1}));
}

TEST_F(TensorIoTest, StatsOfSeededTensorsInRequestAndModelOrder) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  pb::TensorStatsResponse response;
  ASSERT_TRUE(
      Stats(session.id(), {"layers.1.w", "head.w"}, std::nullopt, &response)
          .ok());
  ASSERT_EQ(response.tensors_size(), 2);
  EXPECT_EQ(response.tensors(1).info().fqn(), "embed.w");  // The primary.
  const std::vector<float> values = Seeded("layers.1.w", 35);
  double min = values[0], max = values[0], sum = 0, squares = 0;
  for (float value : values) {
    min = std::min<double>(min, value);
    max = std::max<double>(max, value);
    sum += value;
    squares += static_cast<double>(value) * value;
  }
  const pb::TensorStats& stats = response.tensors(0);
  EXPECT_EQ(stats.min(), min);
  EXPECT_EQ(stats.max(), max);
  EXPECT_DOUBLE_EQ(stats.mean(), sum / 35);
  EXPECT_DOUBLE_EQ(stats.l2_norm(), std::sqrt(squares));
  EXPECT_EQ(stats.nan_count(), 0);
  EXPECT_EQ(stats.inf_count(), 0);
  // Default 16 bins of width (max - min) / 16, the last one closed.
  std::vector<int64_t> counts(16, 0);
  for (float value : values) {
    const int bin = static_cast<int>((value - min) / ((max - min) / 16));
    ++counts[std::min(bin, 15)];
  }
  EXPECT_EQ(std::vector<int64_t>(stats.histogram().counts().begin(),
                                 stats.histogram().counts().end()),
            counts);

  ASSERT_TRUE(Stats(session.id(), {}, std::nullopt, &response).ok());
  std::vector<std::string> fqns;
  for (const pb::TensorStats& tensor : response.tensors()) {
    fqns.push_back(tensor.info().fqn());
  }
  std::vector<std::string> expected;
  for (const auto& [fqn, numel] : kBlocksParams) expected.push_back(fqn);
  EXPECT_EQ(fqns, expected);
}

// summon.proto: "histogram_bins ... 0: no histogram"; Histogram "unset
// when no bins were asked for".
TEST_F(TensorIoTest, HistogramBinsZeroGivesStatsWithoutAHistogram) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  pb::TensorStatsResponse response;
  const grpc::Status status = Stats(session.id(), {"norm.w"}, 0, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.tensors_size(), 1);
  EXPECT_FALSE(response.tensors(0).has_histogram());
  const std::vector<float> values = Seeded("norm.w", 10);
  EXPECT_EQ(response.tensors(0).min(),
            *std::min_element(values.begin(), values.end()));
}

// summon.proto: min, max, mean and l2_norm "are over the finite elements
// only ...; with no finite element they are NaN".
TEST_F(TensorIoTest, StatsOfATensorWithoutFiniteElementsAreNaN) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session session = Open("m", ReadOnly());
  ASSERT_TRUE(WriteFloats(session.id(), "layers.0.attn.b",
                          {kNaN, kInf, -kInf, kNaN, kNaN})
                  .ok());
  pb::TensorStatsResponse response;
  ASSERT_TRUE(Stats(session.id(), {"layers.0.attn.b"}, 4, &response).ok());
  const pb::TensorStats& stats = response.tensors(0);
  EXPECT_EQ(stats.nan_count(), 3);
  EXPECT_EQ(stats.inf_count(), 2);
  EXPECT_TRUE(std::isnan(stats.min())) << stats.min();
  EXPECT_TRUE(std::isnan(stats.max())) << stats.max();
  EXPECT_TRUE(std::isnan(stats.mean())) << stats.mean();
  EXPECT_TRUE(std::isnan(stats.l2_norm())) << stats.l2_norm();
}

TEST_F(TensorIoTest, ModelChecksumListsEveryRankAndUnitInOrder) {
  StartServer(4);
  const pb::Model model = CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD,
                                       kBlocksLayout, std::vector<int>{2});
  const pb::ModelChecksumResponse sums = Checksum("m");
  ASSERT_EQ(sums.shards_size(), 4 * 3);
  const std::vector<std::string> units = {"", "layers.0", "layers.1"};
  for (int i = 0; i < sums.shards_size(); ++i) {
    const pb::ShardChecksum& shard = sums.shards(i);
    EXPECT_EQ(shard.rank(), i / 3);
    EXPECT_EQ(shard.unit(), units[i % 3]);
    EXPECT_EQ(shard.has_grads(), shard.rank() == 2);
    EXPECT_EQ(shard.generation(), 0u);
  }
  EXPECT_EQ(ParamChecksums(sums), ExpectedChecksums(model, SeededBlocks()));
  TensorValues grads;
  for (const auto& [fqn, numel] : kBlocksParams) {
    grads[fqn] = Seeded(fqn + ".grad", numel, kGradSeed);
  }
  EXPECT_EQ(GradChecksums(sums), ExpectedChecksums(model, grads, {2}));
  // Another seed is other data.
  EXPECT_NE(ParamChecksums(sums), ExpectedChecksums(model, SeededBlocks(8)));
}

}  // namespace
}  // namespace summon::tests
