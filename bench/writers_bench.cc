// Issue 11's P8 on its own (bench/writers.h): W concurrent writers, each on
// its own unit, for W = 1, 4, 16, 64 against summond in this process
// (BenchCluster: 1 or more nodes over loopback). The table shows the rate,
// the rate per writer, the scaling over one writer, the close latency and
// the CPUs the process used meanwhile (2.0 on a 2-vCPU machine is
// saturation). `--models M` spreads the same writers over M models: if
// writebacks were serialised per model, more models would raise the rate.
// Every write is read back at the end and checked. summon_bench
// --ops=writers prints the same table.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_cluster.h"
#include "bench/compare_table.h"
#include "bench/writers.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int32_t, nodes, 1, "In-process summond nodes.");
ABSL_FLAG(int32_t, local_ranks, 4, "Ranks per node.");
ABSL_FLAG(std::vector<std::string>, writers,
          (std::vector<std::string>{"1", "4", "16", "64"}),
          "Concurrent writers to measure, one unit each.");
ABSL_FLAG(int32_t, unit_bytes, 4096, "Bytes of each unit's one tensor.");
ABSL_FLAG(double, seconds, 3.0, "How long each writer count runs.");
ABSL_FLAG(int32_t, models, 1,
          "Models the writers are spread over (writer w: model w % M).");

namespace summon::bench {
namespace {

int Run() {
  std::vector<int> counts;
  for (const std::string& text : absl::GetFlag(FLAGS_writers)) {
    counts.push_back(std::stoi(text));
  }
  BenchCluster::Options options;
  options.nodes = absl::GetFlag(FLAGS_nodes);
  options.local_ranks = absl::GetFlag(FLAGS_local_ranks);
  absl::StatusOr<std::unique_ptr<BenchCluster>> cluster =
      BenchCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return 1;
  }
  WritersSetup setup;
  setup.target = (*cluster)->target();
  setup.max_writers = *std::max_element(counts.begin(), counts.end());
  setup.models = std::max(1, absl::GetFlag(FLAGS_models));
  setup.unit_bytes = absl::GetFlag(FLAGS_unit_bytes);
  const client::SummonClient admin(setup.target);
  if (absl::Status created = CreateWriterModels(admin, setup); !created.ok()) {
    std::fprintf(stderr, "%s\n", created.ToString().c_str());
    return 1;
  }
  std::printf(
      "# writers_bench: %d node(s) x %d ranks, %d model(s), one %lld-byte "
      "float32 unit per writer, %.1f s per row\n%s\n%s\n",
      options.nodes, options.local_ranks, setup.models,
      static_cast<long long>(setup.unit_bytes), absl::GetFlag(FLAGS_seconds),
      LoadAverageLine().c_str(), WritersHeader().c_str());
  int failures = 0;
  double single = 0;
  for (int writers : counts) {
    absl::StatusOr<WritersRow> row = MeasureWriters(
        admin, setup, writers, absl::Seconds(absl::GetFlag(FLAGS_seconds)));
    if (!row.ok()) {
      std::fprintf(stderr, "%d writers: %s\n", writers,
                   row.status().ToString().c_str());
      ++failures;
      continue;
    }
    if (writers == 1) single = row->per_second;
    std::printf("%s\n", FormatWritersRow(*row, single).c_str());
    std::fflush(stdout);
    failures += row->wrong != 0;
  }
  DeleteWriterModels(admin, setup);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // The daemon's per-session log lines would drown the table.
  spdlog::set_level(spdlog::level::warn);
  return summon::bench::Run();
}
