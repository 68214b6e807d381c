#ifndef SUMMON_CORE_TENSOR_STATS_H_
#define SUMMON_CORE_TENSOR_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace summon::core {

// Summary numbers of one tensor, computed where the data is so that only
// numbers travel. NaN and Inf elements are counted and left out of min, max,
// mean, the L2 norm and the histogram.
struct TensorStatistics {
  int64_t numel = 0;
  int64_t finite_count = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
  double l2_norm = 0;
  // `bins` equal-width bins over [min, max]; the last bin is closed.
  double histogram_lower = 0;
  double histogram_upper = 0;
  std::vector<int64_t> histogram;
};

// INVALID_ARGUMENT for a non-floating dtype or bins outside [0, 4096]: what
// every statistics computation (host or device) refuses.
absl::Status CheckStatisticsArguments(core::DType dtype, int bins);

// With no finite element, min, max, mean and the L2 norm are NaN. `bins` 0
// gives no histogram. INVALID_ARGUMENT for a non-floating dtype or bins
// outside [0, 4096].
absl::StatusOr<TensorStatistics> ComputeTensorStatistics(core::DType dtype,
                                                         const void* data,
                                                         int64_t numel,
                                                         int bins);

}  // namespace summon::core

#endif  // SUMMON_CORE_TENSOR_STATS_H_
