#include "bench/writers.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace summon::bench {
namespace {

std::string ModelName(int m) { return absl::StrCat("writers", m); }
std::string UnitName(int u) { return absl::StrCat("u", u); }
std::string TensorName(int u) { return absl::StrCat("u", u, ".w"); }

int64_t Numel(const WritersSetup& setup) { return setup.unit_bytes / 4; }

std::string Layout(int units, int64_t numel) {
  std::vector<std::string> entries;
  for (int u = 0; u < units; ++u) {
    entries.push_back(absl::StrCat(R"({"fqn": ")", UnitName(u),
                                   R"(", "params": [{"fqn": ")", TensorName(u),
                                   R"(", "shape": [)", numel,
                                   R"(], "dtype": "float32"}]})"));
  }
  return absl::StrCat(R"({"strategy": "FULL_SHARD", "units": [)",
                      absl::StrJoin(entries, ", "), "]}");
}

// CPU seconds (user + system) this process has used so far.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) /
             1e6;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(p *
                                    static_cast<double>(values.size() - 1))];
}

struct WriterResult {
  int64_t writebacks = 0;
  std::vector<double> close_ms;
  float last_value = 0;
  absl::Status error;
};

// One writer: open unit `u` of `model` writable, write one value
// everywhere, close with writeback; until `stop`.
void Write(const client::SummonClient& client, const std::string& model, int u,
           int64_t numel, const std::atomic<bool>& stop, WriterResult* result) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(UnitName(u));
  std::vector<float> values(static_cast<size_t>(numel));
  while (!stop.load()) {
    absl::StatusOr<v1::Session> session = client.OpenSession(model, options);
    if (!session.ok()) {
      result->error = session.status();
      return;
    }
    const float value = static_cast<float>(result->writebacks + 1);
    std::fill(values.begin(), values.end(), value);
    client::WriteTensorParams write;
    write.tensor = {session->id(), TensorName(u), false};
    write.dtype = v1::DTYPE_FLOAT32;
    absl::StatusOr<v1::WriteTensorResponse> written = client.WriteTensor(
        write, absl::string_view(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float)));
    if (!written.ok()) {
      result->error = written.status();
      return;
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::CloseSessionResponse> closed =
        client.CloseSession(session->id());
    if (!closed.ok() || !closed->written_back()) {
      result->error = closed.ok() ? absl::InternalError("not written back")
                                  : closed.status();
      return;
    }
    result->close_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    result->last_value = value;
    ++result->writebacks;
  }
}

// Elements of writer `w`'s unit that do not hold `expected`.
absl::StatusOr<int64_t> CountWrong(const client::SummonClient& admin,
                                   const WritersSetup& setup, int w,
                                   float expected) {
  v1::SessionOptions read_only;
  read_only.mutable_module()->set_fqn(UnitName(w / setup.models));
  read_only.set_writeback(false);
  absl::StatusOr<v1::Session> session =
      admin.OpenSession(ModelName(w % setup.models), read_only);
  if (!session.ok()) return session.status();
  client::ReadTensorParams read;
  read.tensor = {session->id(), TensorName(w / setup.models), false};
  absl::StatusOr<client::TensorData> data = admin.ReadTensor(read);
  admin.CloseSession(session->id()).IgnoreError();
  if (!data.ok()) return data.status();
  const auto* values = reinterpret_cast<const float*>(data->data.data());
  int64_t wrong = 0;
  for (int64_t i = 0; i < Numel(setup); ++i) wrong += values[i] != expected;
  return wrong;
}

}  // namespace

absl::Status CreateWriterModels(const client::SummonClient& admin,
                                const WritersSetup& setup) {
  const int units = (setup.max_writers + setup.models - 1) / setup.models;
  for (int m = 0; m < setup.models; ++m) {
    client::CreateModelParams create;
    create.name = ModelName(m);
    create.layout_json = Layout(units, Numel(setup));
    if (absl::StatusOr<v1::Model> model = admin.CreateModel(create);
        !model.ok()) {
      return model.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WritersRow> MeasureWriters(const client::SummonClient& admin,
                                          const WritersSetup& setup,
                                          int writers,
                                          absl::Duration duration) {
  std::atomic<bool> stop{false};
  std::vector<WriterResult> results(writers);
  // A client (channel) per writer, as separate tools would have.
  std::vector<std::unique_ptr<client::SummonClient>> clients;
  for (int w = 0; w < writers; ++w) {
    clients.push_back(std::make_unique<client::SummonClient>(setup.target));
  }
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  const double cpu_start = CpuSeconds();
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back(Write, std::cref(*clients[w]),
                         ModelName(w % setup.models), w / setup.models,
                         Numel(setup), std::cref(stop), &results[w]);
  }
  absl::SleepFor(duration);
  stop.store(true);
  for (std::thread& thread : threads) thread.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  WritersRow row;
  row.writers = writers;
  row.cpus = (CpuSeconds() - cpu_start) / elapsed;
  int64_t total = 0;
  std::vector<double> close_ms;
  for (int w = 0; w < writers; ++w) {
    if (!results[w].error.ok()) {
      return absl::Status(
          results[w].error.code(),
          absl::StrCat("writer ", w, ": ", results[w].error.message()));
    }
    total += results[w].writebacks;
    close_ms.insert(close_ms.end(), results[w].close_ms.begin(),
                    results[w].close_ms.end());
    absl::StatusOr<int64_t> wrong =
        CountWrong(admin, setup, w, results[w].last_value);
    if (!wrong.ok()) return wrong.status();
    row.wrong += *wrong;
  }
  row.per_second = static_cast<double>(total) / elapsed;
  row.close_p50_ms = Percentile(close_ms, 0.5);
  row.close_p99_ms = Percentile(close_ms, 0.99);
  return row;
}

void DeleteWriterModels(const client::SummonClient& admin,
                        const WritersSetup& setup) {
  for (int m = 0; m < setup.models; ++m) {
    admin.DeleteModel(ModelName(m)).IgnoreError();
  }
}

std::string WritersHeader() {
  return absl::StrFormat("# %7s %14s %12s %8s %12s %12s %6s %7s", "writers",
                         "writebacks/s", "per_writer/s", "scaling",
                         "close_p50ms", "close_p99ms", "cpus", "#wrong");
}

std::string FormatWritersRow(const WritersRow& row, double single) {
  return absl::StrFormat(
      "  %7d %14.0f %12.1f %8.2f %12.2f %12.2f %6.2f %7d", row.writers,
      row.per_second, row.per_second / row.writers,
      single > 0 ? row.per_second / single : 0.0, row.close_p50_ms,
      row.close_p99_ms, row.cpus, row.wrong);
}

}  // namespace summon::bench
