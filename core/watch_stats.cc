#include "core/watch_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/watch_bins.h"

namespace summon::core {
namespace {

constexpr int64_t kBlock = 4096;

// The fast path works on blocks of kBlock elements (16 KiB of float32, in
// L1 while the histogram loop reads them again) with kLanes independent
// accumulators per statistic: no loop-carried dependency between lanes and
// no branch, so the compiler can vectorise it (float64; float32 spells its
// vectors out, see below; the lanes' sums are added in a
// different order than one running sum: float32 sums in double are exact,
// sums of squares differ in the last bits only).
constexpr int kLanes = 8;
static_assert(kBlock % kLanes == 0);

// The stream from memory: each loop asks for the line this far ahead (the
// hardware prefetcher alone left the loops waiting on loads; with it the
// statistics run at memcpy's speed). Integer arithmetic: past the end of
// the buffer it is no pointer.
constexpr uintptr_t kPrefetchAhead = 4096;  // Bytes.

// The reference loop, element by element: non-finite elements are counted
// and skipped. Used for any block the fast path finds a NaN or Inf in
// (rare: the fast path then redoes the block here, so its results never mix
// a non-finite value in).
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
      const int bin =
          std::min(static_cast<int>((value - lower) * per_width), bins - 1);
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

// The histogram's slots in one array: [below, bin 0 .. bin B-1, above],
// four interleaved copies of it.
struct Slots {
  explicit Slots(int bins)
      : bins(bins),
        stride(static_cast<size_t>(bins) + 2),
        counts(4 * stride, 0) {}
  int32_t above() const { return bins + 1; }
  // Not a slot: FloatSlots' mark for an element the double formula bins.
  int32_t unsure() const { return bins + 2; }
  const int bins;
  const size_t stride;
  std::vector<int64_t> counts;
};

// The reference bin of an element in [lower, upper]: floor((v - lower) *
// per_width) in double, the last bin closed.
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

// float32 binned in float: one subtract, one multiply and a conversion per
// element, 8 lanes per AVX2 instruction instead of 4 in double (the bin in
// double was the larger part of a watch's cost). It gives the reference
// (double) bin exactly: with lower and upper exact floats, the float
// position (v - lower) * per_width is within 3 roundings (2^-24 each) of
// the real one, so within bins * 2^-22 of it, and the double one within
// bins * 2^-50. An element whose float position lies farther than
// `margin` = bins * 2^-20 from an integer therefore floors to the same bin
// in both; the others (about 2 * margin of the elements, and those exactly
// on a bin edge) are marked unsure and binned again in double. Ranges
// where that bound does not hold (edges that are not floats, a width near
// underflow, a float difference that overflows) use the double binner.
struct FloatBinner {
  static std::optional<FloatBinner> Make(const HistogramRange& range,
                                         int bins) {
    const double width = Binner::Width(range, bins);
    FloatBinner binner;
    binner.lower = static_cast<float>(range.lower);
    binner.upper = static_cast<float>(range.upper);
    if (binner.lower != range.lower || binner.upper != range.upper ||
        !(range.upper - range.lower <= std::numeric_limits<float>::max()) ||
        !(width >= 0x1p-100) || bins > (1 << 16)) {
      return std::nullopt;
    }
    binner.per_width = static_cast<float>(1 / width);
    binner.top = static_cast<float>(bins);
    binner.margin = static_cast<float>(bins) * 0x1p-20f;
    binner.bins = bins;
    return binner;
  }
  float lower;
  float upper;
  float per_width;
  float top;  // Clamps the position so the conversion is always defined.
  float margin;
  int32_t bins;
};

// Each element's slot, computed branch-free for a whole block (vectorised).
// The helpers below are always inlined: into each target clone of
// AccumulateFloats/AccumulateDoubles, so compiled for that clone's target.
// Returns whether any element was marked unsure.
[[gnu::always_inline]] inline bool FloatSlots(const float* __restrict values,
                                              int64_t count,
                                              const FloatBinner& binner,
                                              int32_t* __restrict index) {
  // Unsure: the fraction within `margin` of 0 or 1, as one compare (its
  // rounding, at most 2^-25, is far inside the margin's slack).
  const float sure_within = 0.5f - binner.margin;
  int32_t unsure = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float value = values[i];
    float position = (value - binner.lower) * binner.per_width;
    position = position > 0 ? position : 0;
    position = position < binner.top ? position : binner.top;
    const int32_t bin = static_cast<int32_t>(position);
    const float fraction = position - static_cast<float>(bin);
    const bool near_edge = std::abs(fraction - 0.5f) > sure_within;
    int32_t slot = near_edge ? binner.bins + 2 : bin + 1;
    slot = value > binner.upper ? binner.bins + 1 : slot;
    slot = value < binner.lower ? 0 : slot;
    index[i] = slot;
    unsure |= slot == binner.bins + 2;
  }
  return unsure != 0;
}

// The reference slots in double (float64 shards, and float32 over a range
// FloatBinner cannot take). The clamps keep the conversion defined for
// elements outside the range, whose index the selects then replace.
template <typename T>
[[gnu::always_inline]] inline void DoubleSlots(const T* __restrict values,
                                               int64_t count,
                                               const Binner& binner,
                                               int32_t* __restrict index) {
  const double last = static_cast<double>(binner.bins - 1);
  for (int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(values[i]);
    const double position = std::min(
        std::max((value - binner.lower) * binner.per_width, 0.0), last);
    const int32_t bin = static_cast<int32_t>(position) + 1;
    index[i] = value < binner.lower
                   ? 0
                   : (value > binner.upper ? binner.bins + 1 : bin);
  }
}

// Counts a block's slots. Four interleaved copies: runs of one bin would
// otherwise make each increment wait for the previous one's store.
[[gnu::always_inline]] inline void CountSlots(const int32_t* __restrict index,
                                              int64_t count, Slots* slots) {
  int64_t* __restrict counts = slots->counts.data();
  const size_t stride = slots->stride;
  const int64_t whole = count / 4 * 4;
  for (int64_t i = 0; i < whole; i += 4) {
    ++counts[index[i]];
    ++counts[stride + static_cast<size_t>(index[i + 1])];
    ++counts[2 * stride + static_cast<size_t>(index[i + 2])];
    ++counts[3 * stride + static_cast<size_t>(index[i + 3])];
  }
  for (int64_t i = whole; i < count; ++i) ++counts[index[i]];
}

// The fast path's statistics for float and double. Returns false (having
// added nothing) when the block holds a NaN or an Inf: the sums are then
// not finite (squares of floats and doubles below 1e154 cannot overflow a
// double; larger doubles also make the block go the careful way).
template <typename T>
[[gnu::always_inline]] inline bool AccumulateFiniteBlock(
    const T* values, int64_t count, T* lane_min, T* lane_max, T* lane_abs_max,
    double* sum_out, double* sum_of_squares_out) {
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
    __builtin_prefetch(reinterpret_cast<const void*>(
        reinterpret_cast<uintptr_t>(values + i) + kPrefetchAhead));
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
  // NaN comparisons may have been dropped by min/max, but not by the sums.
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

// float32's statistics with GCC's vector extensions (8 floats, 2 x 4
// doubles per step): its vectoriser leaves the generic lane loop above
// scalar for float (float lanes beside double lanes; perf shows
// vminss/vaddsd with spills). Two steps per iteration so that each sum
// waits for its own previous add only every other step.
using Floats = float __attribute__((vector_size(32)));
using HalfFloats = float __attribute__((vector_size(16)));
using Words = int32_t __attribute__((vector_size(32)));
using Doubles = double __attribute__((vector_size(32)));
static_assert(kLanes == 8 && kBlock % 16 == 0);

[[gnu::always_inline]] inline bool AccumulateFiniteBlock(
    const float* values, int64_t count, float* lane_min, float* lane_max,
    float* lane_abs_max, double* sum_out, double* sum_of_squares_out) {
  Floats low;
  Floats high;
  Floats magnitude;
  std::memcpy(&low, lane_min, sizeof(low));
  std::memcpy(&high, lane_max, sizeof(high));
  std::memcpy(&magnitude, lane_abs_max, sizeof(magnitude));
  Doubles sums[4] = {};
  Doubles squares[4] = {};
  const int64_t whole = count / 16 * 16;
  for (int64_t i = 0; i < whole; i += 16) {
    __builtin_prefetch(reinterpret_cast<const void*>(
        reinterpret_cast<uintptr_t>(values + i) + kPrefetchAhead));
    for (int half = 0; half < 2; ++half) {
      Floats value;
      std::memcpy(&value, values + i + 8 * half, sizeof(value));
      low = value < low ? value : low;
      high = value > high ? value : high;
      const Floats size = (Floats)((Words)value & 0x7fffffff);
      magnitude = size > magnitude ? size : magnitude;
      // Each half widened straight from memory: a shuffle of `value` makes
      // GCC go through the stack.
      HalfFloats quarter;
      std::memcpy(&quarter, values + i + 8 * half, sizeof(quarter));
      const Doubles first = __builtin_convertvector(quarter, Doubles);
      std::memcpy(&quarter, values + i + 8 * half + 4, sizeof(quarter));
      const Doubles second = __builtin_convertvector(quarter, Doubles);
      sums[2 * half] += first;
      sums[2 * half + 1] += second;
      squares[2 * half] += first * first;
      squares[2 * half + 1] += second * second;
    }
  }
  double block_sum = 0;
  double block_squares = 0;
  for (int v = 0; v < 4; ++v) {
    for (int lane = 0; lane < 4; ++lane) {
      block_sum += sums[v][lane];
      block_squares += squares[v][lane];
    }
  }
  for (int64_t i = whole; i < count; ++i) {
    const float value = values[i];
    const double wide = static_cast<double>(value);
    low[0] = std::min(low[0], value);
    high[0] = std::max(high[0], value);
    magnitude[0] = std::max(magnitude[0], std::abs(value));
    block_sum += wide;
    block_squares += wide * wide;
  }
  if (!std::isfinite(block_sum) || !std::isfinite(block_squares)) return false;
  std::memcpy(lane_min, &low, sizeof(low));
  std::memcpy(lane_max, &high, sizeof(high));
  std::memcpy(lane_abs_max, &magnitude, sizeof(magnitude));
  *sum_out += block_sum;
  *sum_of_squares_out += block_squares;
  return true;
}

// Gives the block's unsure elements their reference slots before they are
// counted: each run of 64 indices holding one is binned again in double
// (vectorised, as DoubleSlots always is). Rare for float32 data (about
// 2 * bins * 2^-20 of the elements), common only where many elements lie
// exactly on bin edges (half precision over its own range): then the block
// costs about what the double binning costs.
[[gnu::always_inline]] inline void SettleUnsure(const float* values,
                                                int64_t count,
                                                const Binner& binner,
                                                int32_t unsure,
                                                int32_t* index) {
  for (int64_t start = 0; start < count; start += 64) {
    const int64_t end = std::min(count, start + 64);
    int32_t any = 0;
    for (int64_t i = start; i < end; ++i) any |= index[i] == unsure;
    if (any != 0) {
      DoubleSlots(values + start, end - start, binner, index + start);
    }
  }
}

// The one pass over the elements, on float or double directly so that the
// common float32 shard needs no conversion pass (a watch reads every byte
// of the watched shards after every recorded step): block by block the
// statistics, then the block's slots and their counts while it is in L1.
// Inlined into each of the target clones below, so that it is compiled for
// AVX2 where the CPU has it.
template <typename T>
[[gnu::always_inline]] inline void AccumulateValues(
    const T* values, int64_t count, const std::optional<HistogramRange>& range,
    WatchPartial* partial) {
  const int bins = static_cast<int>(partial->histogram.size());
  const bool binning = range.has_value() && bins > 0;
  std::optional<Binner> binner;
  std::optional<FloatBinner> float_binner;
  std::optional<Slots> slots;
  std::vector<int32_t> index;
  if (binning) {
    binner.emplace(*range, bins);
    if constexpr (std::is_same_v<T, float>) {
      float_binner = FloatBinner::Make(*range, bins);
    }
    slots.emplace(bins);
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
    const T* block = values + start;
    const int64_t size = std::min(kBlock, count - start);
    if (!AccumulateFiniteBlock(block, size, lane_min, lane_max, lane_abs_max,
                               &sum, &sum_of_squares)) {
      AccumulateCarefully(block, size, range, partial);
      continue;
    }
    fast += size;
    if (!binning) continue;
    if constexpr (std::is_same_v<T, float>) {
      if (float_binner.has_value()) {
        if (FloatSlots(block, size, *float_binner, index.data())) {
          SettleUnsure(block, size, *binner, slots->unsure(), index.data());
        }
      } else {
        DoubleSlots(block, size, *binner, index.data());
      }
    } else {
      DoubleSlots(block, size, *binner, index.data());
    }
    CountSlots(index.data(), size, &*slots);
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
  const std::vector<int64_t>& counts = slots->counts;
  const size_t stride = slots->stride;
  const auto total = [&](size_t slot) {
    return counts[slot] + counts[stride + slot] + counts[2 * stride + slot] +
           counts[3 * stride + slot];
  };
  partial->below_range += total(0);
  partial->above_range += total(static_cast<size_t>(slots->above()));
  for (size_t bin = 0; bin < static_cast<size_t>(bins); ++bin) {
    partial->histogram[bin] += total(bin + 1);
  }
}

// One copy per instruction set on x86-64: the default (SSE2, what the build
// targets) and AVX2, chosen at load time by the CPU (an ifunc: GCC's and
// clang's target_clones), so the binary stays portable. Elsewhere, one copy
// for the build's target.
#if defined(__x86_64__)
#define SUMMON_WATCH_CLONES [[gnu::target_clones("avx2", "default")]]
#else
#define SUMMON_WATCH_CLONES
#endif

SUMMON_WATCH_CLONES void AccumulateFloats(
    const float* values, int64_t count,
    const std::optional<HistogramRange>& range, WatchPartial* partial) {
  AccumulateValues(values, count, range, partial);
}

SUMMON_WATCH_CLONES void AccumulateDoubles(
    const double* values, int64_t count,
    const std::optional<HistogramRange>& range, WatchPartial* partial) {
  AccumulateValues(values, count, range, partial);
}

#undef SUMMON_WATCH_CLONES

// bfloat16 is the upper half of a float32: widened by a shift (vectorised;
// ConvertElements converts element by element).
void WidenBFloat16(const uint8_t* from, float* to, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    uint16_t half;
    std::memcpy(&half, from + 2 * i, sizeof(half));
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(&to[i], &bits, sizeof(bits));
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
    AccumulateFloats(static_cast<const float*>(data), numel, range, partial);
    return absl::OkStatus();
  }
  if (dtype == DType::kFloat64) {
    AccumulateDoubles(static_cast<const double*>(data), numel, range, partial);
    return absl::OkStatus();
  }
  // Half precision: converted to float32 (exactly) in pieces of 16 blocks,
  // so no full-size copy is made and the float32 path bins them.
  constexpr int64_t kPiece = 16 * kBlock;
  std::vector<float> piece(static_cast<size_t>(std::min(numel, kPiece)));
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t element_size = static_cast<int64_t>(ElementSize(dtype));
  for (int64_t start = 0; start < numel; start += kPiece) {
    const int64_t count = std::min(kPiece, numel - start);
    if (dtype == DType::kBFloat16) {
      WidenBFloat16(bytes + start * element_size, piece.data(), count);
    } else if (absl::Status status =
                   ConvertElements(dtype, bytes + start * element_size,
                                   DType::kFloat32, piece.data(), count);
               !status.ok()) {
      return status;
    }
    AccumulateFloats(piece.data(), count, range, partial);
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
