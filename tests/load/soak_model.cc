#include "tests/load/soak_model.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/seeded_init.h"

namespace summon::load {
namespace {

// Private units get 1000 + 37 * i elements: every residue modulo the shard
// group size comes up, so end padding is exercised.
constexpr int64_t kPrivateBaseNumel = 1000;
constexpr int64_t kPrivateNumelStep = 37;
// Hot units hold just over 1 MiB of float64 (the server's default chunk).
constexpr int64_t kHotBaseNumel = (int64_t{1} << 17) + 13;

}  // namespace

absl::StatusOr<SoakModel> SoakModel::Make(int private_units, int hot_units,
                                          uint64_t seed) {
  SoakModel model;
  model.private_units_ = private_units;
  model.hot_units_ = hot_units;
  for (int i = 0; i < private_units + hot_units; ++i) {
    Tensor tensor;
    const bool hot = i >= private_units;
    tensor.unit = hot ? absl::StrCat("hot", i - private_units)
                      : absl::StrCat("client", i);
    tensor.fqn = absl::StrCat(tensor.unit, ".weight");
    tensor.numel = hot ? kHotBaseNumel + (i - private_units)
                       : kPrivateBaseNumel + kPrivateNumelStep * i;
    tensor.seeded.resize(tensor.numel);
    if (absl::Status filled =
            core::FillSeeded(tensor.fqn, seed, core::DType::kFloat64, 0,
                             tensor.numel, tensor.seeded.data());
        !filled.ok()) {
      return filled;
    }
    model.tensors_.push_back(std::move(tensor));
  }
  return model;
}

std::string SoakModel::LayoutJson() const {
  std::vector<std::string> units;
  for (const Tensor& tensor : tensors_) {
    units.push_back(absl::StrCat(
        R"({"fqn": ")", tensor.unit, R"(", "params": [{"fqn": ")", tensor.fqn,
        R"(", "shape": [)", tensor.numel, R"(], "dtype": "float64"}]})"));
  }
  return absl::StrCat(R"({"strategy": "FULL_SHARD", "units": [)",
                      absl::StrJoin(units, ", "), "]}");
}

absl::StatusOr<double> UniformDelta(const SoakModel::Tensor& tensor,
                                    int64_t first, absl::string_view data) {
  const int64_t count = static_cast<int64_t>(data.size() / sizeof(double));
  if (data.size() % sizeof(double) != 0 || first < 0 ||
      first + count > tensor.numel || count == 0) {
    return absl::DataLossError(absl::StrCat(
        tensor.fqn, ": ", data.size(), " bytes at element ", first,
        " are not a non-empty float64 range of ", tensor.numel, " elements"));
  }
  double delta = 0;
  for (int64_t i = 0; i < count; ++i) {
    double value;
    std::memcpy(&value, data.data() + i * sizeof(double), sizeof(double));
    const double element_delta = value - tensor.seeded[first + i];
    if (i == 0) {
      delta = element_delta;
    } else if (element_delta != delta) {
      return absl::DataLossError(absl::StrCat(
          tensor.fqn, ": element ", first + i, " is seeded + ", element_delta,
          " but element ", first, " is seeded + ", delta));
    }
  }
  const double quanta = delta / kDeltaQuantum;
  if (delta < 0 || quanta != std::floor(quanta)) {
    return absl::DataLossError(
        absl::StrCat(tensor.fqn, ": elements ", first, "..", first + count - 1,
                     " are seeded + ", delta,
                     ", not a sum of writers' deltas (multiples of 1/256)"));
  }
  return delta;
}

}  // namespace summon::load
