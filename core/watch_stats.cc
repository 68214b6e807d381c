#include "core/watch_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

constexpr int64_t kBlock = 4096;

// The one loop over the elements, on float or double directly so that the
// common float32 shard needs no conversion pass (a watch reads every byte
// of the watched shards after every recorded step).
template <typename T>
void AccumulateValues(const T* values, int64_t count,
                      const std::optional<HistogramRange>& range,
                      WatchPartial* partial) {
  const int bins = static_cast<int>(partial->histogram.size());
  const bool binning = range.has_value() && bins > 0;
  const double lower = binning ? range->lower : 0;
  const double upper = binning ? range->upper : 0;
  const double width = binning ? (upper - lower) / bins : 0;
  // A multiply per element instead of a divide.
  const double per_width = width > 0 ? 1 / width : 0;
  double min = partial->min;
  double max = partial->max;
  double abs_max = partial->abs_max;
  double sum = 0;
  double sum_of_squares = 0;
  int64_t finite = partial->finite;
  for (int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(values[i]);
    if (!std::isfinite(value)) {
      ++(std::isnan(value) ? partial->nan_count : partial->inf_count);
      continue;
    }
    if (finite == 0 || value < min) min = value;
    if (finite == 0 || value > max) max = value;
    abs_max = std::max(abs_max, std::fabs(value));
    ++finite;
    sum += value;
    sum_of_squares += value * value;
    if (!binning) continue;
    if (value < lower) {
      ++partial->below_range;
    } else if (value > upper) {
      ++partial->above_range;
    } else {
      const int bin = std::min(
          static_cast<int>((value - lower) * per_width), bins - 1);
      ++partial->histogram[static_cast<size_t>(bin)];
    }
  }
  partial->min = min;
  partial->max = max;
  partial->abs_max = abs_max;
  partial->finite = finite;
  partial->sum += sum;
  partial->sum_of_squares += sum_of_squares;
}

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
  partial->numel += numel;
  if (dtype == DType::kFloat32) {
    AccumulateValues(static_cast<const float*>(data), numel, range, partial);
    return absl::OkStatus();
  }
  if (dtype == DType::kFloat64) {
    AccumulateValues(static_cast<const double*>(data), numel, range, partial);
    return absl::OkStatus();
  }
  // Half precision: converted in blocks, so no full-size copy is made.
  std::vector<double> block(static_cast<size_t>(std::min(numel, kBlock)));
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t element_size = static_cast<int64_t>(ElementSize(dtype));
  for (int64_t start = 0; start < numel; start += kBlock) {
    const int64_t count = std::min(kBlock, numel - start);
    if (absl::Status status =
            ConvertElements(dtype, bytes + start * element_size,
                            DType::kFloat64, block.data(), count);
        !status.ok()) {
      return status;
    }
    AccumulateValues(block.data(), count, range, partial);
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
