#include "server/gpu/device_stats.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/gpu/stats_kernels.h"

namespace summon::server::gpu {
namespace {

absl::Status CudaError(const char* what, int error) {
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", error, " (",
                                          CudaErrorText(error), ")"));
}

}  // namespace

absl::Status CudaDeviceAvailable() {
  const int count = CudaDeviceCount();
  if (count > 0) return absl::OkStatus();
  if (count == 0) return absl::UnavailableError("no CUDA device is visible");
  return absl::UnavailableError(
      absl::StrCat("no CUDA device: ", CudaErrorText(-count)));
}

absl::StatusOr<core::TensorStatistics> ComputeDeviceTensorStatistics(
    core::DType dtype, const void* device_data, int64_t numel, int bins) {
  if (absl::Status valid = core::CheckStatisticsArguments(dtype, bins);
      !valid.ok()) {
    return valid;
  }
  StatsElement element = StatsElement::kFloat32;
  switch (dtype) {
    case core::DType::kFloat64:
      element = StatsElement::kFloat64;
      break;
    case core::DType::kFloat16:
      element = StatsElement::kFloat16;
      break;
    case core::DType::kBFloat16:
      element = StatsElement::kBFloat16;
      break;
    default:  // float32: the other floating dtypes are refused above
      break;
  }
  core::TensorStatistics stats;
  stats.numel = numel;
  stats.histogram.assign(bins, 0);
  std::vector<StatsPartial> partials(kMaxStatsBlocks);
  int blocks = 0;
  if (numel > 0) {
    if (const int error = ComputeStatsPartials(device_data, element, numel,
                                               partials.data(), &blocks)) {
      return CudaError("statistics pass", error);
    }
  }
  double min = std::numeric_limits<double>::infinity();
  double max = -min;
  double sum = 0;
  double sum_of_squares = 0;
  for (int b = 0; b < blocks; ++b) {
    const StatsPartial& part = partials[b];
    stats.finite_count += static_cast<int64_t>(part.finite);
    stats.nan_count += static_cast<int64_t>(part.nan);
    stats.inf_count += static_cast<int64_t>(part.inf);
    if (part.finite == 0) continue;
    min = std::min(min, part.min);
    max = std::max(max, part.max);
    sum += part.sum;
    sum_of_squares += part.sum_of_squares;
  }
  if (stats.finite_count == 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    stats.min = stats.max = stats.mean = stats.l2_norm = nan;
    return stats;
  }
  stats.min = min;
  stats.max = max;
  stats.mean = sum / static_cast<double>(stats.finite_count);
  stats.l2_norm = std::sqrt(sum_of_squares);
  if (bins == 0) return stats;
  stats.histogram_lower = min;
  stats.histogram_upper = max;
  const double width = (max - min) / bins;
  if (width <= 0) {
    // Every finite element is the same value: the first bin holds them all,
    // as on the CPU.
    stats.histogram[0] = stats.finite_count;
    return stats;
  }
  std::vector<unsigned long long> counts(bins);
  if (const int error = ComputeStatsHistogram(device_data, element, numel, min,
                                              width, bins, counts.data())) {
    return CudaError("histogram pass", error);
  }
  for (int b = 0; b < bins; ++b) {
    stats.histogram[b] = static_cast<int64_t>(counts[b]);
  }
  return stats;
}

}  // namespace summon::server::gpu
