#include "tests/load/soak_model.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace summon::load {
namespace {

constexpr uint64_t kSeed = 3;

// Elements [first, first + deltas.size()) of `tensor`, element i moved by
// deltas[i], as float64 bytes.
std::string Shifted(const SoakModel::Tensor& tensor, int64_t first,
                    const std::vector<double>& deltas) {
  std::string bytes(deltas.size() * sizeof(double), '\0');
  for (size_t i = 0; i < deltas.size(); ++i) {
    const double value = tensor.seeded[first + i] + deltas[i];
    std::memcpy(bytes.data() + i * sizeof(double), &value, sizeof(double));
  }
  return bytes;
}

TEST(SoakModelTest, MakeLaysOutPrivateUnitsThenHotUnits) {
  absl::StatusOr<SoakModel> model = SoakModel::Make(3, 2, kSeed);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->tensors().size(), 5u);
  EXPECT_EQ(model->tensors()[1].unit, "client1");
  EXPECT_EQ(model->tensors()[1].fqn, "client1.weight");
  EXPECT_EQ(model->tensors()[1].numel, 1037);
  EXPECT_EQ(model->hot(1), 4);
  EXPECT_EQ(model->tensors()[4].unit, "hot1");
  EXPECT_EQ(model->tensors()[4].numel, (1 << 17) + 14);
}

TEST(SoakModelTest, UniformDeltaReturnsTheDeltaEveryElementCarries) {
  absl::StatusOr<SoakModel> model = SoakModel::Make(1, 0, kSeed);
  ASSERT_TRUE(model.ok()) << model.status();
  const SoakModel::Tensor& tensor = model->tensors()[0];
  const double delta = 5 * kDeltaQuantum;
  absl::StatusOr<double> read =
      UniformDelta(tensor, 10, Shifted(tensor, 10, {delta, delta, delta}));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, delta);
  read = UniformDelta(tensor, 0, Shifted(tensor, 0, {0, 0}));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, 0);
}

TEST(SoakModelTest, UniformDeltaRejectsATornWrite) {
  absl::StatusOr<SoakModel> model = SoakModel::Make(1, 0, kSeed);
  ASSERT_TRUE(model.ok()) << model.status();
  const SoakModel::Tensor& tensor = model->tensors()[0];
  const absl::StatusOr<double> read = UniformDelta(
      tensor, 7, Shifted(tensor, 7, {kDeltaQuantum, kDeltaQuantum, 0}));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("element 9"), absl::string_view::npos)
      << read.status();
}

TEST(SoakModelTest, UniformDeltaRejectsWhatNoWriterAdds) {
  absl::StatusOr<SoakModel> model = SoakModel::Make(1, 0, kSeed);
  ASSERT_TRUE(model.ok()) << model.status();
  const SoakModel::Tensor& tensor = model->tensors()[0];
  EXPECT_EQ(UniformDelta(tensor, 0, Shifted(tensor, 0, {-kDeltaQuantum}))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(UniformDelta(tensor, 0, Shifted(tensor, 0, {kDeltaQuantum / 2}))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  // Out of the tensor, and not whole elements.
  EXPECT_EQ(
      UniformDelta(tensor, tensor.numel, std::string(8, '\0')).status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(UniformDelta(tensor, 0, std::string(7, '\0')).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace summon::load
