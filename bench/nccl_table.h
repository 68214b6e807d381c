#ifndef SUMMON_BENCH_NCCL_TABLE_H_
#define SUMMON_BENCH_NCCL_TABLE_H_

// Result tables in the style of nccl-tests (docs/design.md#conventions), so
// summon's numbers read like theirs: one row per size with the median time,
// algorithm and bus bandwidth and a count of wrong elements.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace summon::bench {

// Median of `samples_us`; the mean of the two middle samples for an even
// count. 0 for no samples.
double Median(std::vector<double> samples_us);

// Nearest-rank percentile: the smallest sample that at least `percent` percent
// of the samples are less than or equal to. 0 for no samples.
double Percentile(std::vector<double> samples_us, double percent);

// busbw / algbw of a gather of a tensor sharded over `group_size` ranks.
// As for nccl-tests' AllGather: each rank starts with 1/G of the tensor and
// ends with all of it, so the busiest link carries (G-1)/G of the bytes and
// busbw = algbw * (G-1)/G. On one CPU node the gather is a memcpy into one
// host copy, not G transfers; the factor is kept so the column compares with
// nccl-tests and stays right once gathers cross nodes. 1 for G = 1.
double GatherBusFactor(int group_size);

// One row of a bandwidth table. algbw = bytes / time; busbw = algbw *
// bus_factor (1 for reads and writebacks, GatherBusFactor for gathers).
struct BandwidthRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string type;
  double time_us = 0;
  double bus_factor = 1;
  int64_t wrong = 0;
};

// "# <operation>" and the column header line.
std::string BandwidthHeader(absl::string_view operation);
// GB/s are 10^9 bytes per second, as in nccl-tests.
std::string FormatBandwidthRow(const BandwidthRow& row);

// One row of a latency table: `repeats` timed repetitions of one operation.
struct LatencyRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string type;
  // Which variant was timed, e.g. "readonly".
  std::string mode;
  int repeats = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t wrong = 0;
};

std::string LatencyHeader(absl::string_view operation);
std::string FormatLatencyRow(const LatencyRow& row);

}  // namespace summon::bench

#endif  // SUMMON_BENCH_NCCL_TABLE_H_
