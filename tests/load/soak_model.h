#ifndef SUMMON_TESTS_LOAD_SOAK_MODEL_H_
#define SUMMON_TESTS_LOAD_SOAK_MODEL_H_

// The model the soak test loads: one unit per tensor, float64, seeded, so
// every value a client reads can be checked exactly against
// seeded + (sum of the deltas written back so far).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::load {

// Every delta a writer adds is a positive multiple of this. Seeded values are
// multiples of 2^-24 in [-0.5, 0.5); in float64 (53-bit mantissa) their sums
// with any realistic number of such deltas are exact, so the final check can
// demand equality and a read can prove that a whole tensor moved by one and
// the same delta (no torn writeback).
inline constexpr double kDeltaQuantum = 1.0 / 256;

class SoakModel {
 public:
  struct Tensor {
    std::string unit;
    std::string fqn;
    int64_t numel = 0;
    // The seeded init of every element.
    std::vector<double> seeded;
  };

  // `private_units` small units (one per client, sizes chosen so the 4-way
  // shards get end padding) followed by `hot_units` larger ones (over 1 MiB,
  // so reads take several stream chunks) that many clients share.
  static absl::StatusOr<SoakModel> Make(int private_units, int hot_units,
                                        uint64_t seed);

  // The layout file's JSON (docs/design.md#the-layout-file), FULL_SHARD.
  std::string LayoutJson() const;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  int private_units() const { return private_units_; }
  int hot_units() const { return hot_units_; }
  // Index of the i-th hot unit in tensors().
  int hot(int i) const { return private_units_ + i; }

 private:
  SoakModel() = default;

  std::vector<Tensor> tensors_;
  int private_units_ = 0;
  int hot_units_ = 0;
};

// The delta d such that `data` (float64 elements [first, first + n) of
// `tensor`) equals seeded + d element by element, exactly. DATA_LOSS naming
// the first element that disagrees with element `first` (a torn or lost
// write), or when d is not a non-negative multiple of kDeltaQuantum.
absl::StatusOr<double> UniformDelta(const SoakModel::Tensor& tensor,
                                    int64_t first, absl::string_view data);

}  // namespace summon::load

#endif  // SUMMON_TESTS_LOAD_SOAK_MODEL_H_
