// Issue 11's P8: writebacks per second with W concurrent writers, each on
// its own unit (open a writable session on the unit, write its tensor,
// close with writeback), spread over one or more models. Writebacks on
// distinct units should scale with the writers, not be serialised per
// model. Used by bench/writers_bench and by summon_bench --ops=writers.
#ifndef SUMMON_BENCH_WRITERS_H_
#define SUMMON_BENCH_WRITERS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/lib/summon_client.h"

namespace summon::bench {

struct WritersSetup {
  std::string target;  // The daemon the writers' own channels connect to.
  int max_writers = 64;
  int models = 1;  // Writer w writes unit w / models of model w % models.
  int64_t unit_bytes = 4096;  // Of each unit's one float32 tensor.
};

struct WritersRow {
  int writers = 0;
  double per_second = 0;  // Writebacks of all writers.
  double close_p50_ms = 0;
  double close_p99_ms = 0;
  // CPU time of this process over wall time: how much of the machine the
  // row used (2.0 is all of a 2-vCPU machine).
  double cpus = 0;
  int64_t wrong = 0;  // Elements not holding their writer's last value.
};

// Creates the models "writers0".. with enough one-tensor units.
absl::Status CreateWriterModels(const client::SummonClient& admin,
                                const WritersSetup& setup);
// `writers` writers for `duration`, each on its own channel; then every
// unit is read back and checked. An error if any writer failed.
absl::StatusOr<WritersRow> MeasureWriters(const client::SummonClient& admin,
                                          const WritersSetup& setup,
                                          int writers, absl::Duration duration);
void DeleteWriterModels(const client::SummonClient& admin,
                        const WritersSetup& setup);

// The table: a header line and one line per row; `single` is the rate of
// one writer, against which each row's scaling is shown.
std::string WritersHeader();
std::string FormatWritersRow(const WritersRow& row, double single);

}  // namespace summon::bench

#endif  // SUMMON_BENCH_WRITERS_H_
