// Issue 11's P8: writebacks per second with W concurrent writers, each on
// its own unit of one model (open a writable session on the unit, write its
// tensor, close with writeback), for W = 1, 4, 16, 64 against summond in
// this process (BenchCluster: 1 or more nodes over loopback). Writebacks on
// distinct units should scale with the writers, not be serialised per
// model; the table shows the rate, the rate per writer, and the close
// latency, and the CPUs the process used meanwhile (2.0 on a 2-vCPU machine
// is saturation). `--models M` spreads the same writers over M models: if
// writebacks were serialised per model, more models would raise the rate.
// Every write is read back at the end and checked.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/bench_cluster.h"
#include "bench/compare_table.h"
#include "client/summon_client.h"
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

std::string ModelName(int m) { return absl::StrCat("writers", m); }

// CPU seconds (user + system) this process has used so far.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) /
             1e6;
}

std::string Layout(int units, int64_t numel) {
  std::vector<std::string> entries;
  for (int u = 0; u < units; ++u) {
    entries.push_back(absl::StrCat(
        R"({"fqn": "u)", u, R"(", "params": [{"fqn": "u)", u,
        R"(.w", "shape": [)", numel, R"(], "dtype": "float32"}]})"));
  }
  return absl::StrCat(R"({"strategy": "FULL_SHARD", "units": [)",
                      absl::StrJoin(entries, ", "), "]}");
}

struct WriterResult {
  int64_t writebacks = 0;
  std::vector<double> close_ms;
  float last_value = 0;
  std::string error;
};

// One writer: open unit `u` of `model` writable, write `value` everywhere,
// close; until `stop`.
void Write(const client::SummonClient& client, const std::string& model, int u,
           int64_t numel, const std::atomic<bool>& stop, WriterResult* result) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(absl::StrCat("u", u));
  std::vector<float> values(static_cast<size_t>(numel));
  while (!stop.load()) {
    absl::StatusOr<v1::Session> session = client.OpenSession(model, options);
    if (!session.ok()) {
      result->error = session.status().ToString();
      return;
    }
    const float value = static_cast<float>(result->writebacks + 1);
    std::fill(values.begin(), values.end(), value);
    client::WriteTensorParams write;
    write.tensor = {session->id(), absl::StrCat("u", u, ".w"), false};
    write.dtype = v1::DTYPE_FLOAT32;
    absl::StatusOr<v1::WriteTensorResponse> written = client.WriteTensor(
        write, absl::string_view(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float)));
    if (!written.ok()) {
      result->error = written.status().ToString();
      return;
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::CloseSessionResponse> closed =
        client.CloseSession(session->id());
    if (!closed.ok() || !closed->written_back()) {
      result->error =
          closed.ok() ? "not written back" : closed.status().ToString();
      return;
    }
    result->close_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    result->last_value = value;
    ++result->writebacks;
  }
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(p * (values.size() - 1))];
}

int Run() {
  std::vector<int> counts;
  for (const std::string& text : absl::GetFlag(FLAGS_writers)) {
    counts.push_back(std::stoi(text));
  }
  const int max_writers = *std::max_element(counts.begin(), counts.end());
  const int64_t numel = absl::GetFlag(FLAGS_unit_bytes) / 4;
  const int models = std::max(1, absl::GetFlag(FLAGS_models));
  const int units_per_model = (max_writers + models - 1) / models;
  BenchCluster::Options options;
  options.nodes = absl::GetFlag(FLAGS_nodes);
  options.local_ranks = absl::GetFlag(FLAGS_local_ranks);
  absl::StatusOr<std::unique_ptr<BenchCluster>> cluster =
      BenchCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return 1;
  }
  client::SummonClient admin((*cluster)->target());
  for (int m = 0; m < models; ++m) {
    client::CreateModelParams create;
    create.name = ModelName(m);
    create.layout_json = Layout(units_per_model, numel);
    if (absl::StatusOr<v1::Model> model = admin.CreateModel(create);
        !model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return 1;
    }
  }
  std::printf(
      "# writers_bench: %d node(s) x %d ranks, %d model(s), one %d-byte "
      "float32 unit per writer, %.1f s per row\n%s\n",
      absl::GetFlag(FLAGS_nodes), absl::GetFlag(FLAGS_local_ranks), models,
      absl::GetFlag(FLAGS_unit_bytes), absl::GetFlag(FLAGS_seconds),
      LoadAverageLine().c_str());
  std::printf("# %7s %14s %12s %12s %12s %6s %7s\n", "writers", "writebacks/s",
              "per_writer/s", "close_p50ms", "close_p99ms", "cpus", "#wrong");
  int failures = 0;
  for (int writers : counts) {
    std::atomic<bool> stop{false};
    std::vector<WriterResult> results(writers);
    std::vector<std::thread> threads;
    // A client (channel) per writer, as separate tools would have.
    std::vector<std::unique_ptr<client::SummonClient>> clients;
    for (int w = 0; w < writers; ++w) {
      clients.push_back(
          std::make_unique<client::SummonClient>((*cluster)->target()));
    }
    const absl::Time start = absl::Now();
    const double cpu_start = CpuSeconds();
    for (int w = 0; w < writers; ++w) {
      threads.emplace_back(Write, std::cref(*clients[w]), ModelName(w % models),
                           w / models, numel, std::cref(stop), &results[w]);
    }
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
    stop.store(true);
    for (std::thread& thread : threads) thread.join();
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
    const double cpus = (CpuSeconds() - cpu_start) / elapsed;
    int64_t total = 0;
    std::vector<double> close_ms;
    int64_t wrong = 0;
    for (int w = 0; w < writers; ++w) {
      if (!results[w].error.empty()) {
        std::fprintf(stderr, "writer %d: %s\n", w, results[w].error.c_str());
        ++failures;
      }
      total += results[w].writebacks;
      close_ms.insert(close_ms.end(), results[w].close_ms.begin(),
                      results[w].close_ms.end());
      // The unit holds the writer's last value everywhere.
      v1::SessionOptions read_only;
      read_only.mutable_module()->set_fqn(absl::StrCat("u", w / models));
      read_only.set_writeback(false);
      absl::StatusOr<v1::Session> session =
          admin.OpenSession(ModelName(w % models), read_only);
      if (!session.ok()) {
        ++failures;
        continue;
      }
      client::ReadTensorParams read;
      read.tensor = {session->id(), absl::StrCat("u", w / models, ".w"), false};
      absl::StatusOr<client::TensorData> data = admin.ReadTensor(read);
      if (data.ok()) {
        const auto* values = reinterpret_cast<const float*>(data->data.data());
        for (int64_t i = 0; i < numel; ++i) {
          wrong += values[i] != results[w].last_value;
        }
      } else {
        ++failures;
      }
      (void)admin.CloseSession(session->id());
    }
    std::printf("  %7d %14.0f %12.1f %12.2f %12.2f %6.2f %7lld\n", writers,
                total / elapsed, total / elapsed / writers,
                Percentile(close_ms, 0.5), Percentile(close_ms, 0.99), cpus,
                static_cast<long long>(wrong));
    failures += wrong != 0;
  }
  for (int m = 0; m < models; ++m) (void)admin.DeleteModel(ModelName(m));
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
