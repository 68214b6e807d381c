// summon_bench: starts summond in-process and measures, through the real gRPC
// client over loopback TCP, session open (the gather), reading a session
// tensor, close with writeback and open+close of a tiny session. Prints
// nccl-tests style tables (bench/nccl_table.h); the exit code is 1 when any
// element is wrong or a call fails.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/bench_cluster.h"
#include "bench/nccl_table.h"
#include "client/summon_client.h"
#include "core/dtype.h"
#include "core/seeded_init.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int64_t, min_bytes, int64_t{1} << 20,
          "Smallest tensor size in bytes (a multiple of 4); sizes double up "
          "to --max_bytes.");
ABSL_FLAG(int64_t, max_bytes, int64_t{256} << 20,
          "Largest tensor size in bytes.");
ABSL_FLAG(int32_t, iters, 5,
          "Timed iterations per size; the table shows their median. Sizes "
          "above --large_bytes run --large_iters instead.");
ABSL_FLAG(int32_t, warmup, 1, "Untimed iterations before the timed ones.");
ABSL_FLAG(int64_t, large_bytes, int64_t{64} << 20,
          "Sizes above this run --large_iters timed iterations, which keeps "
          "a default run under a minute on a 2-core machine.");
ABSL_FLAG(int32_t, large_iters, 3,
          "Timed iterations for sizes above --large_bytes.");
ABSL_FLAG(int32_t, nodes, 1,
          "summond nodes started in-process as one cluster (loopback TCP).");
ABSL_FLAG(int32_t, local_ranks, 4, "Virtual ranks of each in-process summond.");
ABSL_FLAG(std::vector<std::string>, ops,
          std::vector<std::string>({"open", "read", "writeback", "tiny"}),
          "Operations to measure, comma-separated: open, read, writeback, "
          "tiny. They run in that order whatever the order given.");
ABSL_FLAG(int32_t, tiny_repeats, 500,
          "Timed open+close repetitions of the 1 KiB session (after "
          "--warmup untimed ones).");
ABSL_FLAG(int64_t, full_check_bytes, int64_t{16} << 20,
          "open and writeback count wrong elements by reading the session "
          "back: every element up to this size, above it the elements around "
          "every shard boundary and at both ends. read checks every element.");
ABSL_FLAG(
    uint32_t, read_chunk_bytes, 0,
    "ReadTensor chunk payload in bytes; 0: the server's default (1 MiB).");

namespace summon::bench {
namespace {

using client::SummonClient;

constexpr char kModel[] = "summon_bench";
constexpr uint64_t kSeed = 7;
constexpr int64_t kTinyBytes = 1024;
// Elements checked on each side of a shard boundary when a session is
// verified by sample.
constexpr int64_t kBoundaryWindow = 4096;

// One unit of the benchmark model holding one float32 parameter.
struct BenchTensor {
  std::string unit;
  std::string fqn;
  int64_t bytes = 0;
  int64_t numel() const { return bytes / 4; }
};

BenchTensor TensorOfSize(absl::string_view unit, int64_t bytes) {
  return {std::string(unit), absl::StrCat(unit, ".weight"), bytes};
}

// One FULL_SHARD model with a unit per tensor, each unit opened on its own
// (recurse=false), so every size is one model and one CreateModel call.
std::string LayoutJson(const std::vector<BenchTensor>& tensors) {
  std::vector<std::string> units;
  for (const BenchTensor& tensor : tensors) {
    units.push_back(absl::StrCat(
        R"({"fqn": ")", tensor.unit, R"(", "params": [{"fqn": ")", tensor.fqn,
        R"(", "shape": [)", tensor.numel(), R"(], "dtype": "float32"}]})"));
  }
  return absl::StrCat(R"({"strategy": "FULL_SHARD", "units": [)",
                      absl::StrJoin(units, ", "), "]}");
}

v1::SessionOptions UnitScope(const BenchTensor& tensor, bool writeback) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(tensor.unit);
  options.mutable_module()->set_recurse(false);
  options.set_writeback(writeback);
  return options;
}

// Elements of `data` (float32 elements [first, first + n) of `fqn`) that
// differ from `factor` times the seeded init.
absl::StatusOr<int64_t> CountWrong(const std::string& fqn, int64_t first,
                                   absl::string_view data, float factor) {
  constexpr int64_t kBlock = 1 << 16;
  std::vector<float> expected(kBlock);
  std::vector<float> got(kBlock);
  const int64_t total = static_cast<int64_t>(data.size() / sizeof(float));
  int64_t wrong = 0;
  for (int64_t done = 0; done < total; done += kBlock) {
    const int64_t n = std::min(kBlock, total - done);
    absl::Status filled = core::FillSeeded(fqn, kSeed, core::DType::kFloat32,
                                           first + done, n, expected.data());
    if (!filled.ok()) return filled;
    std::memcpy(got.data(), data.data() + done * sizeof(float),
                n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != factor * expected[i]) ++wrong;
    }
  }
  return wrong;
}

// Element ranges [begin, end) to check: the whole tensor up to
// `full_check_bytes`, otherwise windows around every boundary of the
// FULL_SHARD chunks (ceil(numel / G) elements each), where a gather or
// writeback that misplaces a shard shows first.
std::vector<std::pair<int64_t, int64_t>> CheckedRanges(
    const BenchTensor& tensor, int group_size, int64_t full_check_bytes) {
  const int64_t numel = tensor.numel();
  if (tensor.bytes <= full_check_bytes) return {{0, numel}};
  const int64_t chunk = (numel + group_size - 1) / group_size;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // Rank r's chunk starts at r * chunk; r = G stands for the tensor's end.
  for (int rank = 0; rank <= group_size; ++rank) {
    const int64_t boundary = std::min(rank * chunk, numel);
    const int64_t begin = std::max<int64_t>(0, boundary - kBoundaryWindow);
    const int64_t end = std::min(numel, boundary + kBoundaryWindow);
    if (!ranges.empty() && begin <= ranges.back().second) {
      ranges.back().second = std::max(ranges.back().second, end);
    } else {
      ranges.emplace_back(begin, end);
    }
  }
  return ranges;
}

struct BenchConfig {
  int group_size = 1;
  int iters = 5;
  int warmup = 1;
  int64_t large_bytes = 0;
  int large_iters = 3;
  int tiny_repeats = 500;
  int64_t full_check_bytes = 0;
  uint32_t read_chunk_bytes = 0;

  int ItersFor(int64_t bytes) const {
    return bytes > large_bytes ? large_iters : iters;
  }
};

class Bench {
 public:
  Bench(const SummonClient& client, BenchConfig config)
      : client_(client), config_(config) {}

  absl::StatusOr<BandwidthRow> Open(const BenchTensor& tensor) const;
  absl::StatusOr<BandwidthRow> Read(const BenchTensor& tensor) const;
  absl::StatusOr<BandwidthRow> Writeback(const BenchTensor& tensor) const;
  absl::StatusOr<LatencyRow> OpenClose(const BenchTensor& tensor,
                                       bool writeback) const;

 private:
  // Runs `iteration` warmup + `iters` times; returns the timed microseconds
  // each reported, warmup left out.
  absl::StatusOr<std::vector<double>> Repeat(
      int iters,
      const std::function<absl::StatusOr<double>()>& iteration) const;
  // Opens a read-only session on `tensor` and counts the elements that
  // differ from `factor` times the seeded init (CheckedRanges).
  absl::StatusOr<int64_t> VerifyStored(const BenchTensor& tensor,
                                       float factor) const;
  absl::StatusOr<client::TensorData> ReadRange(const std::string& session,
                                               const BenchTensor& tensor,
                                               int64_t first,
                                               int64_t count) const;
  absl::Status Close(const std::string& session) const;

  const SummonClient& client_;
  const BenchConfig config_;
};

double MicrosecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

absl::StatusOr<std::vector<double>> Bench::Repeat(
    int iters, const std::function<absl::StatusOr<double>()>& iteration) const {
  std::vector<double> timed;
  for (int i = 0; i < config_.warmup + iters; ++i) {
    absl::StatusOr<double> us = iteration();
    if (!us.ok()) return us.status();
    if (i >= config_.warmup) timed.push_back(*us);
  }
  return timed;
}

absl::StatusOr<client::TensorData> Bench::ReadRange(const std::string& session,
                                                    const BenchTensor& tensor,
                                                    int64_t first,
                                                    int64_t count) const {
  client::ReadTensorParams params;
  params.tensor = {session, tensor.fqn, false};
  params.element_offset = first;
  params.element_count = count;
  params.chunk_bytes = config_.read_chunk_bytes;
  return client_.ReadTensor(params);
}

absl::Status Bench::Close(const std::string& session) const {
  return client_.CloseSession(session).status();
}

absl::StatusOr<int64_t> Bench::VerifyStored(const BenchTensor& tensor,
                                            float factor) const {
  absl::StatusOr<v1::Session> session =
      client_.OpenSession(kModel, UnitScope(tensor, /*writeback=*/false));
  if (!session.ok()) return session.status();
  int64_t wrong = 0;
  for (const auto& [begin, end] :
       CheckedRanges(tensor, config_.group_size, config_.full_check_bytes)) {
    absl::StatusOr<client::TensorData> data =
        ReadRange(session->id(), tensor, begin, end - begin);
    if (!data.ok()) return data.status();
    absl::StatusOr<int64_t> range_wrong =
        CountWrong(tensor.fqn, begin, data->data, factor);
    if (!range_wrong.ok()) return range_wrong.status();
    wrong += *range_wrong;
  }
  if (absl::Status closed = Close(session->id()); !closed.ok()) return closed;
  return wrong;
}

BandwidthRow RowOf(const BenchTensor& tensor, const std::vector<double>& us,
                   double bus_factor, int64_t wrong) {
  BandwidthRow row;
  row.bytes = tensor.bytes;
  row.count = tensor.numel();
  row.type = "float";
  row.time_us = Median(us);
  row.bus_factor = bus_factor;
  row.wrong = wrong;
  return row;
}

absl::StatusOr<BandwidthRow> Bench::Open(const BenchTensor& tensor) const {
  const v1::SessionOptions options = UnitScope(tensor, /*writeback=*/false);
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<v1::Session> session =
            client_.OpenSession(kModel, options);
        const double elapsed = MicrosecondsSince(start);
        if (!session.ok()) return session.status();
        if (absl::Status closed = Close(session->id()); !closed.ok()) {
          return closed;
        }
        return elapsed;
      });
  if (!us.ok()) return us.status();
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 1);
  if (!wrong.ok()) return wrong.status();
  return RowOf(tensor, *us, GatherBusFactor(config_.group_size), *wrong);
}

absl::StatusOr<BandwidthRow> Bench::Read(const BenchTensor& tensor) const {
  absl::StatusOr<v1::Session> session =
      client_.OpenSession(kModel, UnitScope(tensor, /*writeback=*/false));
  if (!session.ok()) return session.status();
  client::TensorData last;
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<client::TensorData> data =
            ReadRange(session->id(), tensor, 0, tensor.numel());
        const double elapsed = MicrosecondsSince(start);
        if (!data.ok()) return data.status();
        last = *std::move(data);
        return elapsed;
      });
  absl::Status closed = Close(session->id());
  if (!us.ok()) return us.status();
  if (!closed.ok()) return closed;
  absl::StatusOr<int64_t> wrong = CountWrong(tensor.fqn, 0, last.data, 1);
  if (!wrong.ok()) return wrong.status();
  return RowOf(tensor, *us, 1, *wrong);
}

// Every iteration opens a writable session, writes twice the seeded values
// (untimed) and times the close, which writes them into all shards. Doubling
// is exact in float32, so the stored tensor must read back as exactly twice
// the seeded init afterwards.
absl::StatusOr<BandwidthRow> Bench::Writeback(const BenchTensor& tensor) const {
  std::vector<float> doubled(tensor.numel());
  if (absl::Status filled =
          core::FillSeeded(tensor.fqn, kSeed, core::DType::kFloat32, 0,
                           tensor.numel(), doubled.data());
      !filled.ok()) {
    return filled;
  }
  for (float& value : doubled) value *= 2;
  const absl::string_view bytes(reinterpret_cast<const char*>(doubled.data()),
                                tensor.bytes);
  const v1::SessionOptions options = UnitScope(tensor, /*writeback=*/true);
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        absl::StatusOr<v1::Session> session =
            client_.OpenSession(kModel, options);
        if (!session.ok()) return session.status();
        client::WriteTensorParams params;
        params.tensor = {session->id(), tensor.fqn, false};
        params.dtype = v1::DTYPE_FLOAT32;
        absl::Status written = client_.WriteTensor(params, bytes).status();
        if (!written.ok()) {
          client_.CloseSession(session->id(), /*abort=*/true).IgnoreError();
          return written;
        }
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<v1::CloseSessionResponse> closed =
            client_.CloseSession(session->id());
        const double elapsed = MicrosecondsSince(start);
        if (!closed.ok()) return closed.status();
        if (!closed->written_back()) {
          return absl::InternalError(
              absl::StrCat("close of ", tensor.unit, " did not write back"));
        }
        return elapsed;
      });
  if (!us.ok()) return us.status();
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 2);
  if (!wrong.ok()) return wrong.status();
  return RowOf(tensor, *us, 1, *wrong);
}

absl::StatusOr<LatencyRow> Bench::OpenClose(const BenchTensor& tensor,
                                            bool writeback) const {
  const v1::SessionOptions options = UnitScope(tensor, writeback);
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.tiny_repeats, [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<v1::Session> session =
            client_.OpenSession(kModel, options);
        if (!session.ok()) return session.status();
        if (absl::Status closed = Close(session->id()); !closed.ok()) {
          return closed;
        }
        return MicrosecondsSince(start);
      });
  if (!us.ok()) return us.status();
  // A writeback of unmodified tensors must leave the seeded values.
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 1);
  if (!wrong.ok()) return wrong.status();
  LatencyRow row;
  row.bytes = tensor.bytes;
  row.count = tensor.numel();
  row.type = "float";
  row.mode = writeback ? "writable" : "readonly";
  row.repeats = static_cast<int>(us->size());
  row.p50_us = Percentile(*us, 50);
  row.p99_us = Percentile(*us, 99);
  row.wrong = *wrong;
  return row;
}

struct SelectedOps {
  bool open = false;
  bool read = false;
  bool writeback = false;
  bool tiny = false;
};

absl::StatusOr<SelectedOps> ParseOps(const std::vector<std::string>& names) {
  SelectedOps ops;
  for (const std::string& name : names) {
    if (name == "open") {
      ops.open = true;
    } else if (name == "read") {
      ops.read = true;
    } else if (name == "writeback") {
      ops.writeback = true;
    } else if (name == "tiny") {
      ops.tiny = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown operation '", name, "' (open, read, writeback, tiny)"));
    }
  }
  return ops;
}

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig config;
  config.iters = absl::GetFlag(FLAGS_iters);
  config.warmup = absl::GetFlag(FLAGS_warmup);
  config.large_bytes = absl::GetFlag(FLAGS_large_bytes);
  config.large_iters = absl::GetFlag(FLAGS_large_iters);
  config.tiny_repeats = absl::GetFlag(FLAGS_tiny_repeats);
  config.full_check_bytes = absl::GetFlag(FLAGS_full_check_bytes);
  config.read_chunk_bytes = absl::GetFlag(FLAGS_read_chunk_bytes);
  if (config.iters < 1 || config.large_iters < 1 || config.tiny_repeats < 1 ||
      config.warmup < 0) {
    return absl::InvalidArgumentError(
        "--iters, --large_iters and --tiny_repeats must be at least 1, "
        "--warmup at least 0");
  }
  return config;
}

// The benchmark's tensors: --min_bytes doubling up to --max_bytes.
absl::StatusOr<std::vector<BenchTensor>> SizedTensors() {
  const int64_t min_bytes = absl::GetFlag(FLAGS_min_bytes);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  if (min_bytes < 4 || min_bytes % 4 != 0 || max_bytes < min_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_bytes must be a positive multiple of 4 and at most "
                     "--max_bytes; got ",
                     min_bytes, " and ", max_bytes));
  }
  std::vector<BenchTensor> tensors;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    tensors.push_back(TensorOfSize(absl::StrCat("size_", bytes), bytes));
  }
  return tensors;
}

// One bandwidth table: an operation measured per size.
struct BandwidthTable {
  bool selected = false;
  absl::string_view title;
  absl::StatusOr<BandwidthRow> (Bench::*measure)(const BenchTensor&) const;
};

// Prints the selected tables, each row as soon as it is measured, and adds
// the wrong elements of every row to `wrong`.
absl::Status RunTables(const Bench& bench, const SelectedOps& ops,
                       const std::vector<BenchTensor>& sized,
                       const BenchTensor& tiny, int64_t* wrong) {
  const BandwidthTable tables[] = {
      {ops.open, "session open (gather), read-only, busbw = algbw * (G-1)/G",
       &Bench::Open},
      {ops.read,
       "ReadTensor of a whole session tensor (streamed), "
       "busbw = algbw",
       &Bench::Read},
      {ops.writeback,
       "close with writeback (time of CloseSession after one "
       "WriteTensor), busbw = algbw",
       &Bench::Writeback},
  };
  for (const BandwidthTable& table : tables) {
    if (!table.selected) continue;
    std::printf("%s\n", BandwidthHeader(table.title).c_str());
    for (const BenchTensor& tensor : sized) {
      absl::StatusOr<BandwidthRow> row = (bench.*table.measure)(tensor);
      if (!row.ok()) {
        return absl::Status(row.status().code(),
                            absl::StrCat(table.title, ", ", tensor.bytes,
                                         " bytes: ", row.status().message()));
      }
      *wrong += row->wrong;
      std::printf("%s\n", FormatBandwidthRow(*row).c_str());
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  if (!ops.tiny) return absl::OkStatus();
  std::printf(
      "%s\n",
      LatencyHeader("open+close of a tiny session (client-side round trips)")
          .c_str());
  for (const bool writeback : {false, true}) {
    absl::StatusOr<LatencyRow> row = bench.OpenClose(tiny, writeback);
    if (!row.ok()) return row.status();
    *wrong += row->wrong;
    std::printf("%s\n", FormatLatencyRow(*row).c_str());
    std::fflush(stdout);
  }
  std::printf("\n");
  return absl::OkStatus();
}

absl::Status Run() {
  absl::StatusOr<SelectedOps> ops = ParseOps(absl::GetFlag(FLAGS_ops));
  if (!ops.ok()) return ops.status();
  absl::StatusOr<BenchConfig> config = ConfigFromFlags();
  if (!config.ok()) return config.status();
  absl::StatusOr<std::vector<BenchTensor>> sized = SizedTensors();
  if (!sized.ok()) return sized.status();
  const BenchTensor tiny = TensorOfSize("tiny", kTinyBytes);
  std::vector<BenchTensor> all = *sized;
  all.push_back(tiny);

  BenchCluster::Options cluster_options;
  cluster_options.local_ranks = absl::GetFlag(FLAGS_local_ranks);
  cluster_options.nodes = absl::GetFlag(FLAGS_nodes);
  absl::StatusOr<std::unique_ptr<BenchCluster>> cluster =
      BenchCluster::Start(cluster_options);
  if (!cluster.ok()) return cluster.status();
  client::ClientOptions client_options;
  // A 256 MiB read or write on a loaded 2-core machine must not hit the
  // default per-call deadline.
  client_options.timeout = absl::Minutes(10);
  const SummonClient client((*cluster)->target(), client_options);

  client::CreateModelParams create;
  create.name = kModel;
  create.layout_json = LayoutJson(all);
  create.init.mutable_seeded()->set_seed(kSeed);
  absl::StatusOr<v1::Model> model = client.CreateModel(create);
  if (!model.ok()) return model.status();
  config->group_size = model->group_size();
  std::printf(
      "# summon_bench: summond in-process, %d node(s) x %d local ranks "
      "(W = %d, G = %d), gRPC over loopback TCP %s\n"
      "# FULL_SHARD float32, seeded:%d; median of %d iterations (%d above "
      "%ld bytes) after %d warmup\n\n",
      model->nodes(), model->local_ranks(), model->world_size(),
      model->group_size(), (*cluster)->target().c_str(),
      static_cast<int>(kSeed), config->iters, config->large_iters,
      static_cast<long>(config->large_bytes), config->warmup);

  int64_t wrong = 0;
  const Bench bench(client, *config);
  absl::Status tables = RunTables(bench, *ops, *sized, tiny, &wrong);
  // After a failure sessions may still hold the model; the cluster's
  // destructor then unlinks its segments.
  absl::Status deleted = client.DeleteModel(kModel).status();
  if (!tables.ok()) return tables;
  if (!deleted.ok()) return deleted;
  std::printf("# wrong elements: %ld %s\n", static_cast<long>(wrong),
              wrong == 0 ? "OK" : "FAILED");
  if (wrong != 0) {
    return absl::DataLossError(absl::StrCat(wrong, " wrong elements"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "measures summond's session open, read, writeback and tiny-session "
      "latency in-process.\n  summon_bench --local_ranks 4 --max_bytes "
      "268435456");
  absl::ParseCommandLine(argc, argv);
  // The daemon's per-session info logs would interleave with the tables.
  spdlog::set_level(spdlog::level::warn);
  const absl::Status status = summon::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "summon_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
