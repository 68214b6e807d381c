// summon_bench: starts summond in-process and measures, through the real gRPC
// client over loopback TCP, session open (the gather), reading a session
// tensor, close with writeback and open+close of a tiny session. Prints
// nccl-tests style tables (bench/nccl_table.h); with --compare each figure
// stands beside its physical anchor's from the same run (bench/anchors,
// bench/compare_table.h). The exit code is 1 when any element is wrong or a
// call fails.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/anchors/anchors.h"
#include "bench/bench_cluster.h"
#include "bench/bench_ops.h"
#include "bench/compare_table.h"
#include "bench/nccl_table.h"
#include "bench/writers.h"
#include "client/lib/summon_client.h"
#include "server/gpu/cuda_shard_memory.h"
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
ABSL_FLAG(bool, tune_allocator, true,
          "Call client::TuneAllocatorForTensorStreams first, as summonctl "
          "does (false: glibc's defaults, to see what that is worth).");
ABSL_FLAG(int64_t, large_bytes, int64_t{64} << 20,
          "Sizes above this run --large_iters timed iterations, which keeps "
          "a default run under a minute on a 2-core machine.");
ABSL_FLAG(int32_t, large_iters, 3,
          "Timed iterations for sizes above --large_bytes.");
ABSL_FLAG(int32_t, nodes, 1,
          "summond nodes started in-process as one cluster (loopback TCP).");
ABSL_FLAG(int32_t, local_ranks, 4, "Virtual ranks of each in-process summond.");
ABSL_FLAG(std::vector<std::string>, ops,
          std::vector<std::string>({"open", "read", "local_read", "writeback",
                                    "tiny", "params", "writers"}),
          "Operations to measure, comma-separated: open, read, local_read "
          "(MapSession, the same-node path), writeback, tiny, params, writers "
          "(P8: concurrent writers on distinct units). They run in that "
          "order whatever the order given.");
ABSL_FLAG(double, writers_seconds, 1.0,
          "writers: how long each writer count (1, 4, 16, 64) runs.");
ABSL_FLAG(int32_t, writers_models, 1,
          "writers: models the writers are spread over.");
ABSL_FLAG(int64_t, params_unit_bytes, int64_t{256} << 20,
          "params: bytes of the unit holding the small parameter.");
ABSL_FLAG(int64_t, params_bytes, int64_t{1} << 20,
          "params: bytes of the small parameter opened alone.");
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

ABSL_FLAG(int64_t, idle_ms, 0,
          "Cold mode: wait this many milliseconds before each timed "
          "iteration of the bandwidth tables, past every retention (the "
          "session-copy pool's and spare staging's --*_pool_idle), so each "
          "operation meets memory as a user's first one after a pause does. "
          "Under --compare it adds the first-touch anchors' columns.");
ABSL_FLAG(int64_t, hold_ms, 0,
          "The writeback table: keep each session open this many "
          "milliseconds after its WriteTensor, before the timed close (a "
          "user looking before closing; the staging pre-fault runs then).");
ABSL_FLAG(int32_t, gather_parts, 8,
          "summond --gather-parts of the daemons: parts a gather between "
          "nodes overlaps its local copy with; 1: none (copy, then "
          "exchange).");
ABSL_FLAG(std::string, log_level, "warn",
          "Log level of the in-process summond (spdlog's names); debug "
          "prints each pipelined gather's profile: its time, and how long "
          "its exchange waited for the local copy.");
ABSL_FLAG(bool, staging_prefault, true,
          "summond --staging-prefault of the daemons: a writable open makes "
          "and faults the spare staging its writeback adopts; false: the "
          "writeback faults it (the cold writeback before this).");
ABSL_FLAG(absl::Duration, pool_idle, absl::Minutes(10),
          "How long the in-process summond keeps closed sessions' copies and "
          "spare staging (summond --copy-pool-idle, --staging-pool-idle); "
          "2s reproduces the retention before issue 22.");
ABSL_FLAG(bool, first_touch, false,
          "Under --compare, also measure the first-touch anchors (a copy "
          "into fresh anonymous memory, 4 KiB pages and MADV_HUGEPAGE) for "
          "every row; implied by --idle_ms.");

ABSL_FLAG(std::string, device, "cpu",
          "Shard placement of the in-process summond: cpu (shared memory) or "
          "cuda (device memory; bench/gpu_bench.sh runs the NCCL anchor "
          "beside it).");
ABSL_FLAG(bool, compare, false,
          "Measure each operation's physical anchor in the same run (open: "
          "memcpy on one node, a raw Gloo allgather between --nodes "
          "processes on several; read: loopback TCP; writeback: memcpy) and "
          "print median and min of both and the ratio; at least 3 timed "
          "iterations each.");
ABSL_FLAG(std::string, anchor_binary, "",
          "The anchor binary the Gloo anchor's processes run; empty: "
          "anchors/anchor beside summon_bench (as Bazel builds it).");

namespace summon::bench {
namespace {

using client::SummonClient;

constexpr int64_t kTinyBytes = 1024;
// --compare's floor on timed iterations, so that a median and a min mean
// something.
constexpr int kCompareIters = 3;

BandwidthRow RowOf(const BenchTensor& tensor, const Measured& measured,
                   double bus_factor) {
  BandwidthRow row;
  row.bytes = tensor.bytes;
  row.count = tensor.numel();
  row.type = "float";
  row.time_us = Median(measured.us);
  row.bus_factor = bus_factor;
  row.wrong = measured.wrong;
  return row;
}

struct SelectedOps {
  bool open = false;
  bool read = false;
  bool local_read = false;
  bool writeback = false;
  bool tiny = false;
  bool params = false;
  bool writers = false;
};

absl::StatusOr<SelectedOps> ParseOps(const std::vector<std::string>& names) {
  SelectedOps ops;
  for (const std::string& name : names) {
    if (name == "open") {
      ops.open = true;
    } else if (name == "read") {
      ops.read = true;
    } else if (name == "local_read") {
      ops.local_read = true;
    } else if (name == "writeback") {
      ops.writeback = true;
    } else if (name == "tiny") {
      ops.tiny = true;
    } else if (name == "params") {
      ops.params = true;
    } else if (name == "writers") {
      ops.writers = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown operation '", name,
                       "' (open, read, local_read, writeback, tiny, params, "
                       "writers)"));
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
  if (absl::GetFlag(FLAGS_idle_ms) < 0) {
    return absl::InvalidArgumentError("--idle_ms must be at least 0");
  }
  config.idle = absl::Milliseconds(absl::GetFlag(FLAGS_idle_ms));
  if (absl::GetFlag(FLAGS_hold_ms) < 0) {
    return absl::InvalidArgumentError("--hold_ms must be at least 0");
  }
  config.hold = absl::Milliseconds(absl::GetFlag(FLAGS_hold_ms));
  if (absl::GetFlag(FLAGS_compare)) {
    config.iters = std::max(config.iters, kCompareIters);
    config.large_iters = std::max(config.large_iters, kCompareIters);
  }
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

// An anchor's timed microseconds for the bytes of one row.
using AnchorFn =
    std::function<absl::StatusOr<std::vector<double>>(const AnchorRuns&)>;

// One bandwidth table: an operation measured per size, and under --compare
// the anchor it is measured against.
struct BandwidthTable {
  bool selected = false;
  absl::string_view title;
  absl::StatusOr<Measured> (Bench::*measure)(const BenchTensor&) const;
  double bus_factor = 1;
  std::string anchor_name;
  AnchorFn anchor;
};

// Where the tables come from: the operations to run, the cluster's shape and
// whether each row gets its anchor.
struct TableSpec {
  SelectedOps ops;
  int nodes = 1;
  bool compare = false;
  // Under compare: each row also gets the first-touch anchors.
  bool first_touch = false;
  std::string anchor_binary;
};

std::vector<BandwidthTable> Tables(const Bench& bench, const TableSpec& spec) {
  const std::string anchor_binary = spec.anchor_binary;
  const int nodes = spec.nodes;
  // On one node a gather is one copy per byte; across nodes each node's
  // part crosses the wire as in an allgather between the nodes.
  BandwidthTable open = {
      spec.ops.open,
      "session open (gather), read-only, busbw = algbw * (G-1)/G",
      &Bench::Open,
      GatherBusFactor(bench.config().group_size),
      "memcpy of the same bytes (warm pages)",
      MemcpyMicros};
  if (nodes > 1) {
    open.anchor_name = absl::StrCat("raw Gloo allgather, ", nodes,
                                    " processes, TCP over loopback");
    open.anchor = [anchor_binary, nodes](const AnchorRuns& runs) {
      return GlooAllgatherMicros(anchor_binary, nodes, runs);
    };
  }
  return {
      open,
      {spec.ops.read,
       "ReadTensor of a whole session tensor (streamed) into a fresh "
       "result, busbw = algbw",
       &Bench::Read, 1, "loopback TCP, one socket, 1 MiB writes",
       [](const AnchorRuns& runs) { return LoopbackTcpMicros(runs); }},
      {spec.ops.read,
       "the same stream through ReadTensorChunks into a buffer the client "
       "holds (pages mapped, as the anchor's receiver's), busbw = algbw",
       &Bench::ReadIntoHeldBuffer, 1, "loopback TCP, one socket, 1 MiB writes",
       [](const AnchorRuns& runs) { return LoopbackTcpMicros(runs); }},
      {spec.ops.local_read && nodes == 1,
       "same-node read: MapSession, the tensor copied out of the mapping "
       "into a held buffer, unmap, busbw = algbw",
       &Bench::LocalRead, 1, "memcpy of the same bytes (warm pages)",
       MemcpyMicros},
      {spec.ops.writeback,
       "close with writeback (time of CloseSession after one "
       "WriteTensor), busbw = algbw",
       &Bench::Writeback, 1, "memcpy of the same bytes (warm pages)",
       MemcpyMicros},
  };
}

// One row: the operation and, under --compare, its anchor right after it, so
// both run under the same load.
absl::Status RunRow(const Bench& bench, const BandwidthTable& table,
                    const TableSpec& spec, const BenchTensor& tensor,
                    int64_t* wrong) {
  absl::StatusOr<Measured> measured = (bench.*table.measure)(tensor);
  if (!measured.ok()) return measured.status();
  *wrong += measured->wrong;
  if (!spec.compare) {
    std::printf(
        "%s\n",
        FormatBandwidthRow(RowOf(tensor, *measured, table.bus_factor)).c_str());
    return absl::OkStatus();
  }
  AnchorRuns runs;
  runs.bytes = tensor.bytes;
  runs.warmup = bench.config().warmup;
  runs.iters = bench.config().ItersFor(tensor.bytes);
  absl::StatusOr<std::vector<double>> anchor_us = table.anchor(runs);
  if (!anchor_us.ok()) return anchor_us.status();
  CompareRow row;
  row.bytes = tensor.bytes;
  row.count = tensor.numel();
  row.type = "float";
  row.summon_us = measured->us;
  row.anchor_us = *std::move(anchor_us);
  row.wrong = measured->wrong;
  if (spec.first_touch) {
    for (const bool huge : {false, true}) {
      absl::StatusOr<std::vector<double>> touch_us =
          FirstTouchMicros(runs, huge);
      if (!touch_us.ok()) return touch_us.status();
      (huge ? row.touch_huge_us : row.touch_us) = *std::move(touch_us);
    }
  }
  std::printf("%s\n", FormatCompareRow(row).c_str());
  return absl::OkStatus();
}

// Prints the selected tables, each row as soon as it is measured, and adds
// the wrong elements of every row to `wrong`.
absl::Status RunTables(const Bench& bench, const TableSpec& spec,
                       const std::vector<BenchTensor>& sized, int64_t* wrong) {
  for (const BandwidthTable& table : Tables(bench, spec)) {
    if (!table.selected) continue;
    const std::string header =
        spec.compare
            ? CompareHeader(table.title, table.anchor_name, spec.first_touch)
            : BandwidthHeader(table.title);
    std::printf("%s\n", header.c_str());
    for (const BenchTensor& tensor : sized) {
      if (absl::Status row = RunRow(bench, table, spec, tensor, wrong);
          !row.ok()) {
        return absl::Status(row.code(),
                            absl::StrCat(table.title, ", ", tensor.bytes,
                                         " bytes: ", row.message()));
      }
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return absl::OkStatus();
}

absl::Status PrintLatencyRow(const absl::StatusOr<LatencyRow>& row,
                             int64_t* wrong) {
  if (!row.ok()) return row.status();
  *wrong += row->wrong;
  std::printf("%s\n", FormatLatencyRow(*row).c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

// The latency tables: open+close of a tiny session (P4) and the open of one
// parameter inside a large unit against the unit's (P5).
absl::Status RunLatencyTables(const Bench& bench, const SelectedOps& ops,
                              const BenchTensor& tiny, const SplitUnit& split,
                              int64_t* wrong) {
  if (ops.tiny) {
    std::printf(
        "%s\n",
        LatencyHeader("open+close of a tiny session (client-side round trips)")
            .c_str());
    for (const bool writeback : {false, true}) {
      if (absl::Status printed =
              PrintLatencyRow(bench.OpenClose(tiny, writeback), wrong);
          !printed.ok()) {
        return printed;
      }
    }
    std::printf("\n");
  }
  if (!ops.params) return absl::OkStatus();
  std::printf("%s\n",
              LatencyHeader("open of one parameter (params scope) inside a "
                            "unit vs the whole unit, read-only; the close "
                            "is not timed")
                  .c_str());
  absl::StatusOr<LatencyRow> param = bench.OpenSplit(split, false);
  if (absl::Status printed = PrintLatencyRow(param, wrong); !printed.ok()) {
    return printed;
  }
  absl::StatusOr<LatencyRow> unit = bench.OpenSplit(split, true);
  if (absl::Status printed = PrintLatencyRow(unit, wrong); !printed.ok()) {
    return printed;
  }
  std::printf(
      "# the parameter's open is %.0fx cheaper than the unit's (p50)\n\n",
      param->p50_us > 0 ? unit->p50_us / param->p50_us : 0.0);
  return absl::OkStatus();
}

// P8: writebacks per second of 1, 4, 16 and 64 writers, each on its own
// unit and channel (bench/writers.h); the scaling column divides by one
// writer's rate.
absl::Status RunWritersTable(const std::string& target, int64_t* wrong) {
  WritersSetup setup;
  setup.target = target;
  setup.models = std::max(1, absl::GetFlag(FLAGS_writers_models));
  const client::SummonClient admin(target);
  if (absl::Status created = CreateWriterModels(admin, setup); !created.ok()) {
    return created;
  }
  std::printf(
      "# concurrent writers (P8): each opens its own %lld-byte unit of %d "
      "model(s) writable, writes it and closes with writeback, for %.1f s; "
      "scaling = writebacks/s over one writer's\n%s\n",
      static_cast<long long>(setup.unit_bytes), setup.models,
      absl::GetFlag(FLAGS_writers_seconds), WritersHeader().c_str());
  double single = 0;
  absl::Status status;
  for (int writers : {1, 4, 16, 64}) {
    absl::StatusOr<WritersRow> row =
        MeasureWriters(admin, setup, writers,
                       absl::Seconds(absl::GetFlag(FLAGS_writers_seconds)));
    if (!row.ok()) {
      status = row.status();
      break;
    }
    if (writers == 1) single = row->per_second;
    *wrong += row->wrong;
    std::printf("%s\n", FormatWritersRow(*row, single).c_str());
    std::fflush(stdout);
  }
  DeleteWriterModels(admin, setup);
  std::printf("\n");
  return status;
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
  cluster_options.pool_idle = absl::GetFlag(FLAGS_pool_idle);
  cluster_options.gather_parts = absl::GetFlag(FLAGS_gather_parts);
  cluster_options.staging_prefault = absl::GetFlag(FLAGS_staging_prefault);
  if (const std::string device = absl::GetFlag(FLAGS_device);
      device == "cuda") {
    absl::StatusOr<std::unique_ptr<server::gpu::CudaShardMemoryProvider>>
        provider = server::gpu::CudaShardMemoryProvider::Create();
    if (!provider.ok()) return provider.status();
    cluster_options.device = *std::move(provider);
  } else if (device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device is cpu or cuda, not '", device, "'"));
  }
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
  const int64_t params_unit_bytes = absl::GetFlag(FLAGS_params_unit_bytes);
  const int64_t params_bytes = absl::GetFlag(FLAGS_params_bytes);
  if (params_bytes < 4 || params_bytes % 4 != 0 || params_unit_bytes % 4 != 0 ||
      params_unit_bytes <= params_bytes) {
    return absl::InvalidArgumentError(
        "--params_bytes must be a positive multiple of 4 below "
        "--params_unit_bytes, also a multiple of 4");
  }
  const SplitUnit split =
      SplitUnitOf("params_unit", params_unit_bytes, params_bytes);
  create.layout_json = LayoutJson(all, ops->params ? &split : nullptr);
  create.init.mutable_seeded()->set_seed(kSeed);
  absl::StatusOr<v1::Model> model = client.CreateModel(create);
  if (!model.ok()) return model.status();
  config->group_size = model->group_size();
  std::printf(
      "# summon_bench: summond in-process, %d node(s) x %d local ranks "
      "(W = %d, G = %d), gRPC over loopback TCP %s\n"
      "# FULL_SHARD float32, seeded:%d; median of %d iterations (%d above "
      "%ld bytes) after %d warmup%s\n\n",
      model->nodes(), model->local_ranks(), model->world_size(),
      model->group_size(), (*cluster)->target().c_str(),
      static_cast<int>(kSeed), config->iters, config->large_iters,
      static_cast<long>(config->large_bytes), config->warmup,
      config->idle > absl::ZeroDuration()
          ? absl::StrCat("; cold: ", absl::FormatDuration(config->idle),
                         " idle before each timed iteration")
                .c_str()
          : "");
  TableSpec spec;
  spec.ops = *ops;
  spec.nodes = model->nodes();
  spec.compare = absl::GetFlag(FLAGS_compare);
  spec.first_touch = spec.compare && (absl::GetFlag(FLAGS_first_touch) ||
                                      config->idle > absl::ZeroDuration());
  spec.anchor_binary = AnchorBinaryPath(absl::GetFlag(FLAGS_anchor_binary));
  if (spec.compare) {
    std::printf(
        "%s\n# ratio = summon's bandwidth / the anchor's (1.00: as fast as "
        "the anchor); ratio compares medians, r.best the fastest "
        "iterations; a.* columns are the anchor's\n\n",
        LoadAverageLine().c_str());
  }

  int64_t wrong = 0;
  const Bench bench(client, *config);
  absl::Status tables = RunTables(bench, spec, *sized, &wrong);
  if (tables.ok()) tables = RunLatencyTables(bench, *ops, tiny, split, &wrong);
  if (tables.ok() && ops->writers) {
    tables = RunWritersTable((*cluster)->target(), &wrong);
  }
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
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  if (absl::GetFlag(FLAGS_tune_allocator)) {
    summon::client::TuneAllocatorForTensorStreams();
  }
  const absl::Status status = summon::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "summon_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
