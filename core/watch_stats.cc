#include "core/watch_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/watch_bins.h"

namespace summon::core {
namespace {

constexpr int64_t kBlock = 4096;

// The fast path works on blocks of kBlock elements (16 KiB of float32, in
// L1 while the histogram loop reads them again) with kLanes independent
// accumulators per statistic: no loop-carried dependency between lanes and
// no branch, so the compiler vectorises it (the lanes' sums are added in a
// different order than one running sum: float32 sums in double are exact,
// sums of squares differ in the last bits only).
constexpr int kLanes = 8;
static_assert(kBlock % kLanes == 0);

// The reference loop, element by element: non-finite elements are counted
// and skipped. Used for half precision blocks' tails, and for any block
// the fast path finds a NaN or Inf in (rare: the fast path then redoes the
// block here, so its results never mix a non-finite value in).
template <typename T>
void AccumulateCarefully(const T* values, int64_t count,
                         const std::optional<HistogramRange>& range,
                         WatchPartial* partial) {
  const int bins = static_cast<int>(partial->histogram.size());
  const bool binning = range.has_value() && bins > 0;
  const double lower = binning ? range->lower : 0;
  const double upper = binning ? range->upper : 0;
  // A multiply per element instead of a divide; core/watch_bins.h's scale,
  // as the CUDA kernel's (watch_bins_test holds the bins to its slots).
  const double per_width = binning ? WatchBinScale(lower, upper, bins) : 0;
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

// The histogram's bins as indices into [below, bin 0 .. bin B-1, above]:
// computed branch-free for a whole block (vectorised), then counted.
struct Binner {
  Binner(const HistogramRange& range, int bins)
      : bins(bins),
        lower(range.lower),
        upper(range.upper),
        // As the reference loop (and the CUDA kernel) computes it, so
        // every element lands in the same bin on every path.
        per_width(WatchBinScale(range.lower, range.upper, bins)) {}
  static double Width(const HistogramRange& range, int bins) {
    return (range.upper - range.lower) / bins;
  }
  const int bins;
  const double lower;
  const double upper;
  const double per_width;
};

// Counts `count` finite elements into `extended`: four copies of (below,
// bins, above), added up by the caller.
// Each element's bin is the reference loop's: floor((v - lower) *
// per_width), the last bin closed; the clamps keep the conversion defined
// for elements outside the range, whose index the selects then replace.
template <typename T>
void BinBlock(const T* __restrict values, int64_t count,
              const Binner& binner, int32_t* __restrict index,
              int64_t* extended) {
  const double last = static_cast<double>(binner.bins - 1);
  for (int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(values[i]);
    const double position =
        std::min(std::max((value - binner.lower) * binner.per_width, 0.0),
                 last);
    const int32_t bin = static_cast<int32_t>(position) + 1;
    index[i] = value < binner.lower
                   ? 0
                   : (value > binner.upper ? binner.bins + 1 : bin);
  }
  // Four interleaved counters per bin: runs of one bin would otherwise make
  // each increment wait for the previous one's store.
  const int64_t stride = binner.bins + 2;
  const int64_t whole = count / 4 * 4;
  for (int64_t i = 0; i < whole; i += 4) {
    ++extended[index[i]];
    ++extended[stride + index[i + 1]];
    ++extended[2 * stride + index[i + 2]];
    ++extended[3 * stride + index[i + 3]];
  }
  for (int64_t i = whole; i < count; ++i) ++extended[index[i]];
}

// The fast path for float and double. Returns false (having added nothing)
// when the block holds a NaN or an Inf, or its squares overflow.
template <typename T>
bool AccumulateFiniteBlock(const T* values, int64_t count, T* lane_min,
                           T* lane_max, T* lane_abs_max, double* sum_out,
                           double* sum_of_squares_out) {
  double sum[kLanes] = {};
  double squares[kLanes] = {};
  T low[kLanes];
  T high[kLanes];
  T magnitude[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    low[lane] = lane_min[lane];
    high[lane] = lane_max[lane];
    magnitude[lane] = lane_abs_max[lane];
  }
  const int64_t whole = count / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const T value = values[i + lane];
      const double wide = static_cast<double>(value);
      low[lane] = std::min(low[lane], value);
      high[lane] = std::max(high[lane], value);
      magnitude[lane] = std::max(magnitude[lane], std::abs(value));
      sum[lane] += wide;
      squares[lane] += wide * wide;
    }
  }
  for (int64_t i = whole; i < count; ++i) {
    const T value = values[i];
    const double wide = static_cast<double>(value);
    low[0] = std::min(low[0], value);
    high[0] = std::max(high[0], value);
    magnitude[0] = std::max(magnitude[0], std::abs(value));
    sum[0] += wide;
    squares[0] += wide * wide;
  }
  double block_sum = 0;
  double block_squares = 0;
  for (int lane = 0; lane < kLanes; ++lane) {
    block_sum += sum[lane];
    block_squares += squares[lane];
  }
  // A NaN or Inf makes the sums non-finite (NaN comparisons may have been
  // dropped by min/max, but not by the sums).
  if (!std::isfinite(block_sum) || !std::isfinite(block_squares)) return false;
  for (int lane = 0; lane < kLanes; ++lane) {
    lane_min[lane] = low[lane];
    lane_max[lane] = high[lane];
    lane_abs_max[lane] = magnitude[lane];
  }
  *sum_out += block_sum;
  *sum_of_squares_out += block_squares;
  return true;
}

// The one pass over the elements, on float or double directly so that the
// common float32 shard needs no conversion pass (a watch reads every byte
// of the watched shards after every recorded step): block by block the
// fast path, then the histogram over the same block while it is in cache.
template <typename T>
void AccumulateValues(const T* values, int64_t count,
                      const std::optional<HistogramRange>& range,
                      WatchPartial* partial) {
  const int bins = static_cast<int>(partial->histogram.size());
  const bool binning = range.has_value() && bins > 0;
  std::optional<Binner> binner;
  std::vector<int64_t> extended;
  std::vector<int32_t> index;
  if (binning) {
    binner.emplace(*range, bins);
    extended.assign(4 * (static_cast<size_t>(bins) + 2), 0);
    index.resize(static_cast<size_t>(std::min(count, kBlock)));
  }
  constexpr T kHuge = std::numeric_limits<T>::infinity();
  T lane_min[kLanes];
  T lane_max[kLanes];
  T lane_abs_max[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    lane_min[lane] = kHuge;
    lane_max[lane] = -kHuge;
    lane_abs_max[lane] = 0;
  }
  double sum = 0;
  double sum_of_squares = 0;
  int64_t fast = 0;  // Elements the fast path took.
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t block = std::min(kBlock, count - start);
    if (!AccumulateFiniteBlock(values + start, block, lane_min, lane_max,
                               lane_abs_max, &sum, &sum_of_squares)) {
      AccumulateCarefully(values + start, block, range, partial);
      continue;
    }
    fast += block;
    if (binning) {
      BinBlock(values + start, block, *binner, index.data(), extended.data());
    }
  }
  if (fast == 0) return;
  double min = lane_min[0];
  double max = lane_max[0];
  double abs_max = lane_abs_max[0];
  for (int lane = 1; lane < kLanes; ++lane) {
    min = std::min(min, static_cast<double>(lane_min[lane]));
    max = std::max(max, static_cast<double>(lane_max[lane]));
    abs_max = std::max(abs_max, static_cast<double>(lane_abs_max[lane]));
  }
  if (partial->finite == 0 || min < partial->min) partial->min = min;
  if (partial->finite == 0 || max > partial->max) partial->max = max;
  partial->abs_max = std::max(partial->abs_max, abs_max);
  partial->finite += fast;
  partial->sum += sum;
  partial->sum_of_squares += sum_of_squares;
  if (!binning) return;
  const size_t stride = static_cast<size_t>(bins) + 2;
  for (size_t copy = 1; copy < 4; ++copy) {
    for (size_t slot = 0; slot < stride; ++slot) {
      extended[slot] += extended[copy * stride + slot];
    }
  }
  partial->below_range += extended[0];
  partial->above_range += extended[stride - 1];
  for (size_t bin = 0; bin < static_cast<size_t>(bins); ++bin) {
    partial->histogram[bin] += extended[bin + 1];
  }
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
