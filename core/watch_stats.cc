#include "core/watch_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

constexpr int64_t kBlock = 4096;

}  // namespace

WatchPartial EmptyWatchPartial(int bins, bool with_range) {
  WatchPartial partial;
  if (with_range) partial.histogram.assign(static_cast<size_t>(bins), 0);
  return partial;
}

absl::Status AccumulateWatchPartial(DType dtype, const void* data,
                                    int64_t numel,
                                    const std::optional<HistogramRange>& range,
                                    WatchPartial* partial) {
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a watch needs a floating-point tensor, not ", DTypeName(dtype)));
  }
  const int bins = static_cast<int>(partial->histogram.size());
  const bool binning = range.has_value() && bins > 0;
  const double lower = binning ? range->lower : 0;
  const double upper = binning ? range->upper : 0;
  const double width = binning ? (upper - lower) / bins : 0;
  // Converted in blocks so half-precision shards need no full-size copy.
  std::vector<double> block(static_cast<size_t>(std::min(numel, kBlock)));
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t element_size = static_cast<int64_t>(ElementSize(dtype));
  partial->numel += numel;
  for (int64_t start = 0; start < numel; start += kBlock) {
    const int64_t count = std::min(kBlock, numel - start);
    if (absl::Status status =
            ConvertElements(dtype, bytes + start * element_size,
                            DType::kFloat64, block.data(), count);
        !status.ok()) {
      return status;
    }
    for (int64_t i = 0; i < count; ++i) {
      const double value = block[static_cast<size_t>(i)];
      if (std::isnan(value)) {
        ++partial->nan_count;
        continue;
      }
      if (std::isinf(value)) {
        ++partial->inf_count;
        continue;
      }
      if (partial->finite == 0 || value < partial->min) partial->min = value;
      if (partial->finite == 0 || value > partial->max) partial->max = value;
      partial->abs_max = std::max(partial->abs_max, std::fabs(value));
      ++partial->finite;
      partial->sum += value;
      partial->sum_of_squares += value * value;
      if (!binning) continue;
      if (value < lower) {
        ++partial->below_range;
      } else if (value > upper) {
        ++partial->above_range;
      } else {
        int bin = width > 0 ? static_cast<int>((value - lower) / width) : 0;
        bin = std::clamp(bin, 0, bins - 1);
        ++partial->histogram[static_cast<size_t>(bin)];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CombineWatchPartials(const WatchPartial& other,
                                  WatchPartial* into) {
  if (other.histogram.size() != into->histogram.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("partials with ", other.histogram.size(), " and ",
                     into->histogram.size(), " histogram bins"));
  }
  if (other.finite > 0) {
    if (into->finite == 0 || other.min < into->min) into->min = other.min;
    if (into->finite == 0 || other.max > into->max) into->max = other.max;
    into->abs_max = std::max(into->abs_max, other.abs_max);
  }
  into->numel += other.numel;
  into->finite += other.finite;
  into->nan_count += other.nan_count;
  into->inf_count += other.inf_count;
  into->sum += other.sum;
  into->sum_of_squares += other.sum_of_squares;
  for (size_t bin = 0; bin < other.histogram.size(); ++bin) {
    into->histogram[bin] += other.histogram[bin];
  }
  into->below_range += other.below_range;
  into->above_range += other.above_range;
  return absl::OkStatus();
}

WatchStatistics FinishWatchStatistics(
    const WatchPartial& combined, const std::optional<HistogramRange>& range) {
  WatchStatistics stats;
  stats.numel = combined.numel;
  stats.nan_count = combined.nan_count;
  stats.inf_count = combined.inf_count;
  stats.histogram = combined.histogram;
  stats.below_range = combined.below_range;
  stats.above_range = combined.above_range;
  if (!combined.histogram.empty()) stats.range = range;
  if (combined.finite == 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    stats.l2_norm = stats.mean = stats.min = stats.max = stats.abs_max = nan;
    return stats;
  }
  stats.l2_norm = std::sqrt(combined.sum_of_squares);
  stats.mean = combined.sum / static_cast<double>(combined.finite);
  stats.min = combined.min;
  stats.max = combined.max;
  stats.abs_max = combined.abs_max;
  return stats;
}

std::optional<HistogramRange> NextHistogramRange(const WatchStatistics& stats) {
  if (!std::isfinite(stats.min) || !std::isfinite(stats.max)) {
    return std::nullopt;
  }
  return HistogramRange{stats.min, stats.max};
}

}  // namespace summon::core
