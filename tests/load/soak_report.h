#ifndef SUMMON_TESTS_LOAD_SOAK_REPORT_H_
#define SUMMON_TESTS_LOAD_SOAK_REPORT_H_

// The soak test's summary: every client's report merged, and a table of
// operations per second and latency percentiles per operation kind.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/load/soak_client.h"

namespace summon::load {

// Latencies, writebacks and errors concatenated, counts summed.
ClientReport MergeReports(std::vector<ClientReport> reports);

int64_t TotalUnexpected(const ClientReport& report);

// One row per Op: OP, COUNT (successful calls), OPS/S over `elapsed`, P50,
// P90, P99 and MAX in milliseconds (nearest rank), REFUSED (expected
// refusals) and UNEXPECTED; then a row of totals.
std::string FormatSoakTable(const ClientReport& report, absl::Duration elapsed);

}  // namespace summon::load

#endif  // SUMMON_TESTS_LOAD_SOAK_REPORT_H_
