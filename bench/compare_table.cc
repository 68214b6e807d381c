#include "bench/compare_table.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/nccl_table.h"

namespace summon::bench {
namespace {

double Min(const std::vector<double>& samples) {
  return samples.empty() ? 0
                         : *std::min_element(samples.begin(), samples.end());
}

// bytes / us = 10^6 B/s, so / 1e3 gives 10^9 B/s.
double GBps(int64_t bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0; }

double Ratio(double anchor_us, double summon_us) {
  return summon_us > 0 ? anchor_us / summon_us : 0;
}

}  // namespace

CompareFigures FiguresOf(const CompareRow& row) {
  CompareFigures figures;
  figures.summon_median_us = Median(row.summon_us);
  figures.summon_min_us = Min(row.summon_us);
  figures.anchor_median_us = Median(row.anchor_us);
  figures.anchor_min_us = Min(row.anchor_us);
  figures.ratio_median =
      Ratio(figures.anchor_median_us, figures.summon_median_us);
  figures.ratio_best = Ratio(figures.anchor_min_us, figures.summon_min_us);
  return figures;
}

std::string CompareHeader(absl::string_view operation, absl::string_view anchor,
                          bool first_touch) {
  return absl::StrCat(
      "# ", operation, " vs ", anchor,
      first_touch ? "; t.algbw, h.algbw: the first-touch anchors, a copy into "
                    "fresh 4 KiB pages and into fresh MADV_HUGEPAGE memory"
                  : "",
      "\n",
      absl::StrFormat(
          "#%11s  %15s  %5s  %10s  %10s  %8s  %10s  %10s  %8s  %6s  %6s  %6s",
          "size(B)", "count(elements)", "type", "med(us)", "min(us)", "algbw",
          "a.med(us)", "a.min(us)", "a.algbw", "ratio", "r.best", "#wrong"),
      first_touch ? absl::StrFormat("  %8s  %8s", "t.algbw", "h.algbw") : "");
}

std::string FormatCompareRow(const CompareRow& row) {
  const CompareFigures f = FiguresOf(row);
  return absl::StrFormat(
             "%12d  %15d  %5s  %10.1f  %10.1f  %8.2f  %10.1f  %10.1f  %8.2f  "
             "%6.2f  "
             "%6.2f  %6d",
             row.bytes, row.count, row.type, f.summon_median_us,
             f.summon_min_us, GBps(row.bytes, f.summon_median_us),
             f.anchor_median_us, f.anchor_min_us,
             GBps(row.bytes, f.anchor_median_us), f.ratio_median, f.ratio_best,
             row.wrong) +
         (row.touch_us.empty()
              ? ""
              : absl::StrFormat("  %8.2f  %8.2f",
                                GBps(row.bytes, Median(row.touch_us)),
                                GBps(row.bytes, Median(row.touch_huge_us))));
}

std::string LoadAverageLine() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "# load average at start: unknown";
  return absl::StrFormat("# load average at start: %.2f %.2f %.2f", load[0],
                         load[1], load[2]);
}

}  // namespace summon::bench
