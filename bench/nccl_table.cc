#include "bench/nccl_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace summon::bench {

double Median(std::vector<double> samples_us) {
  if (samples_us.empty()) return 0;
  std::sort(samples_us.begin(), samples_us.end());
  const size_t middle = samples_us.size() / 2;
  if (samples_us.size() % 2 == 1) return samples_us[middle];
  return (samples_us[middle - 1] + samples_us[middle]) / 2;
}

double Percentile(std::vector<double> samples_us, double percent) {
  if (samples_us.empty()) return 0;
  std::sort(samples_us.begin(), samples_us.end());
  const double rank =
      std::ceil(percent / 100 * static_cast<double>(samples_us.size()));
  const size_t index = static_cast<size_t>(std::max(rank, 1.0)) - 1;
  return samples_us[std::min(index, samples_us.size() - 1)];
}

double GatherBusFactor(int group_size) {
  if (group_size <= 1) return 1;
  return static_cast<double>(group_size - 1) / group_size;
}

std::string BandwidthHeader(absl::string_view operation) {
  return absl::StrCat(
      "# ", operation, "\n",
      absl::StrFormat("#%11s  %15s  %5s  %10s  %11s  %11s  %6s", "size(B)",
                      "count(elements)", "type", "time(us)", "algbw(GB/s)",
                      "busbw(GB/s)", "#wrong"));
}

std::string FormatBandwidthRow(const BandwidthRow& row) {
  // bytes / us = 10^6 B/s, so / 1e3 gives 10^9 B/s.
  const double algbw = row.time_us > 0 ? row.bytes / row.time_us / 1e3 : 0;
  return absl::StrFormat("%12d  %15d  %5s  %10.1f  %11.2f  %11.2f  %6d",
                         row.bytes, row.count, row.type, row.time_us, algbw,
                         algbw * row.bus_factor, row.wrong);
}

std::string LatencyHeader(absl::string_view operation) {
  return absl::StrCat(
      "# ", operation, "\n",
      absl::StrFormat("#%11s  %15s  %5s  %9s  %7s  %10s  %10s  %6s", "size(B)",
                      "count(elements)", "type", "session", "repeats",
                      "p50(us)", "p99(us)", "#wrong"));
}

std::string FormatLatencyRow(const LatencyRow& row) {
  return absl::StrFormat("%12d  %15d  %5s  %9s  %7d  %10.1f  %10.1f  %6d",
                         row.bytes, row.count, row.type, row.mode, row.repeats,
                         row.p50_us, row.p99_us, row.wrong);
}

}  // namespace summon::bench
