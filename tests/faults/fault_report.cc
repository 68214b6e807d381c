#include "tests/faults/fault_report.h"

#include <algorithm>
#include <array>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace summon::tests {
namespace {

std::string Milliseconds(const std::optional<absl::Duration>& duration) {
  return duration.has_value()
             ? absl::StrCat(absl::ToInt64Milliseconds(*duration))
             : "-";
}

// Prints the table after the last test, whatever the tests' outcome.
class PrintReportAtExit : public testing::Environment {
 public:
  // Starts the report's clock before the first test.
  void SetUp() override { FaultReport::Get(); }
  void TearDown() override { std::cout << FaultReport::Get().Table(); }
};

[[maybe_unused]] const testing::Environment* const kPrintReport =
    testing::AddGlobalTestEnvironment(new PrintReportAtExit);

}  // namespace

FaultReport& FaultReport::Get() {
  static FaultReport* const report = new FaultReport;
  return *report;
}

void FaultReport::Add(FaultRow row) {
  absl::MutexLock lock(&mu_);
  rows_.push_back(std::move(row));
}

std::string FaultReport::Table() const {
  using Line = std::array<std::string, 6>;
  std::vector<Line> lines = {{"scenario", "expected", "observed",
                              "shards intact", "detect (ms)", "re-form (ms)"}};
  {
    absl::MutexLock lock(&mu_);
    for (const FaultRow& row : rows_) {
      lines.push_back({row.scenario, row.expected, row.observed,
                       row.shards_intact ? "yes" : "NO",
                       Milliseconds(row.detect), Milliseconds(row.reform)});
    }
  }
  std::array<size_t, 6> width{};
  for (const Line& line : lines) {
    for (size_t c = 0; c < line.size(); ++c) {
      width[c] = std::max(width[c], line[c].size());
    }
  }
  std::string table = "\nFault harness (3 nodes x 2 ranks)\n";
  for (size_t l = 0; l < lines.size(); ++l) {
    std::vector<std::string> cells;
    for (size_t c = 0; c < lines[l].size(); ++c) {
      cells.push_back(lines[l][c] +
                      std::string(width[c] - lines[l][c].size(), ' '));
    }
    absl::StrAppend(&table, "| ", absl::StrJoin(cells, " | "), " |\n");
    if (l == 0) {
      std::vector<std::string> rules;
      for (size_t w : width) rules.push_back(std::string(w, '-'));
      absl::StrAppend(&table, "|-", absl::StrJoin(rules, "-|-"), "-|\n");
    }
  }
  absl::StrAppend(&table, "harness runtime: ",
                  absl::ToInt64Milliseconds(absl::Now() - created_), " ms\n");
  return table;
}

}  // namespace summon::tests
