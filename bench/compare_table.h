#ifndef SUMMON_BENCH_COMPARE_TABLE_H_
#define SUMMON_BENCH_COMPARE_TABLE_H_

// summon_bench --compare's table: each summon figure beside its physical
// anchor's (bench/anchors), both measured in the same run, and their ratio,
// in nccl-tests style columns.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace summon::bench {

// One size: summon's timed iterations and the anchor's, of the same bytes.
struct CompareRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string type;
  std::vector<double> summon_us;
  std::vector<double> anchor_us;
  int64_t wrong = 0;
  // The first-touch anchors (FirstTouchMicros) of the same bytes, into fresh
  // 4 KiB pages and into fresh MADV_HUGEPAGE memory; both empty when not
  // measured (their columns are left out).
  std::vector<double> touch_us;
  std::vector<double> touch_huge_us;
};

// What a row prints. ratio = summon's bandwidth / the anchor's (the anchor's
// time / summon's): 1.0 is as fast as the anchor, 0.5 half as fast. The
// median ratio compares medians, the best ratio the fastest iterations.
struct CompareFigures {
  double summon_median_us = 0;
  double summon_min_us = 0;
  double anchor_median_us = 0;
  double anchor_min_us = 0;
  double ratio_median = 0;
  double ratio_best = 0;
};

CompareFigures FiguresOf(const CompareRow& row);

// "# <operation> vs <anchor>" and the column header line; with
// `first_touch` two more columns, t.algbw and h.algbw: the first-touch
// anchors' bandwidth into fresh 4 KiB pages and into fresh huge pages.
std::string CompareHeader(absl::string_view operation, absl::string_view anchor,
                          bool first_touch = false);
// algbw columns are bytes / median time in 10^9 B/s, as in nccl-tests. The
// first-touch columns are printed when the row has touch_us.
std::string FormatCompareRow(const CompareRow& row);

// "# load average at start: 1m 5m 15m" (getloadavg), so a reader knows how
// busy the machine was.
std::string LoadAverageLine();

}  // namespace summon::bench

#endif  // SUMMON_BENCH_COMPARE_TABLE_H_
