#include "core/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

constexpr int kMaxBins = 4096;
constexpr int64_t kBlock = 4096;

// Visits every element as a double, converting in blocks so that half
// precision tensors need no full-size float copy.
template <typename Visit>
absl::Status ForEachElement(core::DType dtype, const void* data, int64_t numel,
                            Visit visit) {
  std::vector<double> block(static_cast<size_t>(std::min(numel, kBlock)));
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t element_size = static_cast<int64_t>(core::ElementSize(dtype));
  for (int64_t start = 0; start < numel; start += kBlock) {
    const int64_t count = std::min(kBlock, numel - start);
    if (absl::Status status =
            core::ConvertElements(dtype, bytes + start * element_size,
                                  core::DType::kFloat64, block.data(), count);
        !status.ok()) {
      return status;
    }
    for (int64_t i = 0; i < count; ++i) visit(block[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStatisticsArguments(core::DType dtype, int bins) {
  if (!core::IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("statistics need a floating-point tensor, not ",
                     core::DTypeName(dtype)));
  }
  if (bins < 0 || bins > kMaxBins) {
    return absl::InvalidArgumentError(absl::StrCat(
        "histogram bins must be in [0, ", kMaxBins, "], got ", bins));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorStatistics> ComputeTensorStatistics(core::DType dtype,
                                                         const void* data,
                                                         int64_t numel,
                                                         int bins) {
  if (absl::Status valid = CheckStatisticsArguments(dtype, bins); !valid.ok()) {
    return valid;
  }
  TensorStatistics stats;
  stats.numel = numel;
  double sum = 0;
  double sum_of_squares = 0;
  double min = 0;
  double max = 0;
  absl::Status status = ForEachElement(dtype, data, numel, [&](double value) {
    if (std::isnan(value)) {
      ++stats.nan_count;
      return;
    }
    if (std::isinf(value)) {
      ++stats.inf_count;
      return;
    }
    if (stats.finite_count == 0 || value < min) min = value;
    if (stats.finite_count == 0 || value > max) max = value;
    ++stats.finite_count;
    sum += value;
    sum_of_squares += value * value;
  });
  if (!status.ok()) return status;
  stats.histogram.assign(bins, 0);
  if (stats.finite_count == 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    stats.min = stats.max = stats.mean = stats.l2_norm = nan;
    return stats;
  }
  if (bins == 0) {
    stats.min = min;
    stats.max = max;
    stats.mean = sum / static_cast<double>(stats.finite_count);
    stats.l2_norm = std::sqrt(sum_of_squares);
    return stats;
  }
  stats.min = min;
  stats.max = max;
  stats.mean = sum / static_cast<double>(stats.finite_count);
  stats.l2_norm = std::sqrt(sum_of_squares);
  stats.histogram_lower = min;
  stats.histogram_upper = max;
  const double width = (max - min) / bins;
  status = ForEachElement(dtype, data, numel, [&](double value) {
    if (!std::isfinite(value)) return;
    int bin = width > 0 ? static_cast<int>((value - min) / width) : 0;
    bin = std::clamp(bin, 0, bins - 1);
    ++stats.histogram[bin];
  });
  if (!status.ok()) return status;
  return stats;
}

}  // namespace summon::core
