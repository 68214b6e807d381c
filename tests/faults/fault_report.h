#ifndef SUMMON_TESTS_FAULTS_FAULT_REPORT_H_
#define SUMMON_TESTS_FAULTS_FAULT_REPORT_H_

// The fault harness's summary: one row per scenario, printed as a table
// once every test ran (issue 5: scenario, expected, observed, shards intact,
// time to detect).

#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace summon::tests {

struct FaultRow {
  std::string scenario;
  std::string expected;
  std::string observed;
  bool shards_intact = false;
  // From the fault to the first client call that failed because of it (or,
  // for a lease, to the session's abort). Unset: nothing to detect.
  std::optional<absl::Duration> detect;
  // From restarting (or resuming) the failed process until every node
  // served again.
  std::optional<absl::Duration> reform;
};

class FaultReport {
 public:
  // The report of this test binary.
  static FaultReport& Get();

  void Add(FaultRow row);
  // Fixed-width columns, one line per row, then the harness's wall time
  // since the report was created.
  std::string Table() const;

 private:
  FaultReport() = default;

  const absl::Time created_ = absl::Now();
  mutable absl::Mutex mu_;
  std::vector<FaultRow> rows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_FAULTS_FAULT_REPORT_H_
