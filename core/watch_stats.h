#ifndef SUMMON_CORE_WATCH_STATS_H_
#define SUMMON_CORE_WATCH_STATS_H_

// A watch's statistics without a gather: each node reduces the slices its
// own ranks hold into a WatchPartial (sums, counts, extremes and a
// fixed-range histogram, all of which add up), the leader combines the
// nodes' partials and finishes them into a WatchRecord. Pure: the caller
// brings the bytes.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace summon::core {

// The histogram's range, fixed before anything is counted so that every
// node bins alike: the previous record's [min, max], or a first pass's.
struct HistogramRange {
  double lower = 0;
  double upper = 0;
};

// What one node (or one slice) contributes. NaN and Inf elements are
// counted and left out of every other field.
struct WatchPartial {
  int64_t numel = 0;
  int64_t finite = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  double sum = 0;
  double sum_of_squares = 0;
  double min = 0;  // Meaningful only when finite > 0.
  double max = 0;
  double abs_max = 0;
  // `bins` counts over the range (empty without a range); finite elements
  // outside it go to below/above.
  std::vector<int64_t> histogram;
  int64_t below_range = 0;
  int64_t above_range = 0;
};

// An empty partial with `bins` zero counts (none without a range).
WatchPartial EmptyWatchPartial(int bins, bool with_range);

// Adds `numel` elements of `dtype` at `data` into `partial`. Elements in
// [lower, upper] go to bin floor((v - lower) / width), the last bin closed;
// a zero-width range puts every element equal to it in bin 0.
// INVALID_ARGUMENT for a non-floating dtype.
absl::Status AccumulateWatchPartial(DType dtype, const void* data,
                                    int64_t numel,
                                    const std::optional<HistogramRange>& range,
                                    WatchPartial* partial);

// `into` += `other`. INVALID_ARGUMENT when the histograms differ in size.
absl::Status CombineWatchPartials(const WatchPartial& other,
                                  WatchPartial* into);

// The numbers a watch records. With no finite element, l2_norm, mean, min,
// max and abs_max are NaN.
struct WatchStatistics {
  int64_t numel = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  double l2_norm = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double abs_max = 0;
  std::optional<HistogramRange> range;
  std::vector<int64_t> histogram;
  int64_t below_range = 0;
  int64_t above_range = 0;
};

WatchStatistics FinishWatchStatistics(const WatchPartial& combined,
                                      const std::optional<HistogramRange>& range);

// The range the next record bins over: this record's [min, max], or none
// when it has no finite element (the next record then makes a first pass).
std::optional<HistogramRange> NextHistogramRange(const WatchStatistics& stats);

}  // namespace summon::core

#endif  // SUMMON_CORE_WATCH_STATS_H_
