#include "tests/load/soak_report.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/nccl_table.h"

namespace summon::load {
namespace {

constexpr char kRowFormat[] = "%-16s %9s %9s %9s %9s %9s %9s %8s %10s\n";

std::string Row(absl::string_view op, int64_t count, double per_second,
                const std::vector<double>& ms, int64_t refused,
                int64_t unexpected) {
  const auto percentile = [&](double percent) {
    return ms.empty() ? std::string("-")
                      : absl::StrFormat("%.2f", bench::Percentile(ms, percent));
  };
  return absl::StrFormat(kRowFormat, op, absl::StrCat(count),
                         absl::StrFormat("%.1f", per_second), percentile(50),
                         percentile(90), percentile(99), percentile(100),
                         absl::StrCat(refused), absl::StrCat(unexpected));
}

}  // namespace

ClientReport MergeReports(std::vector<ClientReport> reports) {
  ClientReport merged;
  for (ClientReport& report : reports) {
    for (int op = 0; op < kOpCount; ++op) {
      std::vector<double>& into = merged.latencies_ms[op];
      into.insert(into.end(), report.latencies_ms[op].begin(),
                  report.latencies_ms[op].end());
      merged.refused[op] += report.refused[op];
      merged.unexpected[op] += report.unexpected[op];
    }
    for (std::string& error : report.errors) {
      merged.errors.push_back(std::move(error));
    }
    merged.writebacks.insert(merged.writebacks.end(), report.writebacks.begin(),
                             report.writebacks.end());
  }
  return merged;
}

int64_t TotalUnexpected(const ClientReport& report) {
  int64_t total = 0;
  for (int64_t unexpected : report.unexpected) total += unexpected;
  return total;
}

std::string FormatSoakTable(const ClientReport& report,
                            absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  std::string table =
      absl::StrFormat(kRowFormat, "OP", "COUNT", "OPS/S", "P50_MS", "P90_MS",
                      "P99_MS", "MAX_MS", "REFUSED", "UNEXPECTED");
  std::vector<double> all_ms;
  int64_t refused = 0;
  for (int op = 0; op < kOpCount; ++op) {
    const std::vector<double>& ms = report.latencies_ms[op];
    const int64_t count = static_cast<int64_t>(ms.size());
    absl::StrAppend(&table,
                    Row(OpName(static_cast<Op>(op)), count, count / seconds, ms,
                        report.refused[op], report.unexpected[op]));
    all_ms.insert(all_ms.end(), ms.begin(), ms.end());
    refused += report.refused[op];
  }
  absl::StrAppend(&table, Row("all", static_cast<int64_t>(all_ms.size()),
                              all_ms.size() / seconds, all_ms, refused,
                              TotalUnexpected(report)));
  return table;
}

}  // namespace summon::load
