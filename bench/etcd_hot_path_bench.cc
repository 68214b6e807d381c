// The cost of etcd on the hot path (issue 31): the same operations on two
// clusters of in-process summond (BenchCluster) that differ only in their
// coordinator, the static one (node 0 leads) and etcd (Debian's
// /usr/bin/etcd on free loopback ports, the tests' harness), both alive in
// one run and timed in alternation, one repetition on each in turn, so a
// busy machine's load falls on both alike. Each call goes to its cluster's
// leader (no forwarding hop). Rows: open+close of a tiny session, read-only,
// writable and unwritten, and written (its close writes back: the
// writeback's commit decision, one etcd transaction), and a large
// writeback: open a writable session, write the whole tensor, close with
// writeback. nccl-tests style columns, the
// static and etcd figures beside each other and the p50 difference; `wrong`
// counts elements read back afterwards that differ from what was last
// written (the seeded init for the tiny tensor).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_cluster.h"
#include "bench/bench_ops.h"
#include "bench/compare_table.h"
#include "bench/nccl_table.h"
#include "client/lib/summon_client.h"
#include "core/seeded_init.h"
#include "tests/coordinator/etcd_cluster.h"

ABSL_FLAG(int32_t, members, 1, "etcd members (1 or 3).");
ABSL_FLAG(int32_t, nodes, 3, "summond nodes of each cluster.");
ABSL_FLAG(int32_t, local_ranks, 1, "Ranks per node.");
ABSL_FLAG(int32_t, tiny_repeats, 300,
          "Timed open+close repetitions per cluster and mode.");
ABSL_FLAG(int64_t, large_bytes, int64_t{256} << 20,
          "Bytes of the written-back tensor.");
ABSL_FLAG(int32_t, large_iters, 5,
          "Timed writebacks of the large tensor per cluster.");

namespace summon::bench {
namespace {

using client::SummonClient;

constexpr int64_t kTinyBytes = 1024;
constexpr int kWarmup = 3;

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// One cluster under test: its in-process nodes and a client of its leader.
struct Side {
  std::string name;
  std::unique_ptr<BenchCluster> cluster;
  std::unique_ptr<SummonClient> leader;
};

absl::StatusOr<Side> StartSide(const std::string& name,
                               BenchCluster::Options options) {
  Side side;
  side.name = name;
  absl::StatusOr<std::unique_ptr<BenchCluster>> cluster =
      BenchCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  side.cluster = *std::move(cluster);
  client::ClientOptions client_options;
  // A 256 MiB write on a loaded 2-core machine must not hit the default
  // per-call deadline.
  client_options.timeout = absl::Minutes(10);
  const SummonClient first(side.cluster->target(0), client_options);
  absl::StatusOr<v1::ClusterStatus> status = first.GetClusterStatus();
  if (!status.ok()) return status.status();
  const int leader = side.cluster->nodes() > 1 ? status->leader() : 0;
  side.leader = std::make_unique<SummonClient>(side.cluster->target(leader),
                                               client_options);
  return side;
}

absl::Status Close(const SummonClient& client, const std::string& session) {
  absl::StatusOr<v1::CloseSessionResponse> closed =
      client.CloseSession(session);
  return closed.status();
}

// How the tiny session is used between its open and its close.
enum class TinyMode { kReadOnly, kWritable, kWritten };

const char* ModeName(TinyMode mode) {
  switch (mode) {
    case TinyMode::kReadOnly:
      return "readonly";
    case TinyMode::kWritable:
      return "writable";
    case TinyMode::kWritten:
      return "written";
  }
  return "";
}

// Open + close of the tiny tensor's unit, timed together; kWritten writes
// `bytes` (the seeded values again) first, so the close writes back (a
// commit decision), where a writable session left unwritten has nothing to
// write back.
absl::StatusOr<double> OpenCloseOnce(const SummonClient& client,
                                     const BenchTensor& tiny, TinyMode mode,
                                     absl::string_view bytes) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(tiny.unit);
  options.mutable_module()->set_recurse(false);
  options.set_writeback(mode != TinyMode::kReadOnly);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::Session> session = client.OpenSession(kModel, options);
  if (!session.ok()) return session.status();
  if (mode == TinyMode::kWritten) {
    client::WriteTensorParams params;
    params.tensor = {session->id(), tiny.fqn, false};
    params.dtype = v1::DTYPE_FLOAT32;
    if (absl::Status written = client.WriteTensor(params, bytes).status();
        !written.ok()) {
      client.CloseSession(session->id(), /*abort=*/true).IgnoreError();
      return written;
    }
  }
  if (absl::Status closed = Close(client, session->id()); !closed.ok()) {
    return closed;
  }
  return MicrosSince(start);
}

// Open a writable session, write the whole tensor, close with writeback,
// timed together.
absl::StatusOr<double> WritebackOnce(const SummonClient& client,
                                     const BenchTensor& large,
                                     absl::string_view bytes) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(large.unit);
  options.mutable_module()->set_recurse(false);
  options.set_writeback(true);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::Session> session = client.OpenSession(kModel, options);
  if (!session.ok()) return session.status();
  client::WriteTensorParams params;
  params.tensor = {session->id(), large.fqn, false};
  params.dtype = v1::DTYPE_FLOAT32;
  if (absl::Status written = client.WriteTensor(params, bytes).status();
      !written.ok()) {
    client.CloseSession(session->id(), /*abort=*/true).IgnoreError();
    return written;
  }
  absl::StatusOr<v1::CloseSessionResponse> closed =
      client.CloseSession(session->id());
  if (!closed.ok()) return closed.status();
  if (!closed->written_back()) {
    return absl::InternalError("the close did not write back");
  }
  return MicrosSince(start);
}

// The floats of `tensor` as stored, against `expected`: how many differ.
absl::StatusOr<int64_t> WrongElements(const SummonClient& client,
                                      const BenchTensor& tensor,
                                      const std::vector<float>& expected) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(tensor.unit);
  options.mutable_module()->set_recurse(false);
  options.set_writeback(false);
  absl::StatusOr<v1::Session> session = client.OpenSession(kModel, options);
  if (!session.ok()) return session.status();
  client::ReadTensorParams read;
  read.tensor = {session->id(), tensor.fqn, false};
  absl::StatusOr<client::TensorData> data = client.ReadTensor(read);
  if (absl::Status closed = Close(client, session->id()); !closed.ok()) {
    return closed;
  }
  if (!data.ok()) return data.status();
  if (static_cast<int64_t>(data->data.size()) != tensor.bytes) {
    return tensor.numel();
  }
  int64_t wrong = 0;
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    float value;
    std::memcpy(&value, data->data.data() + i * 4, 4);
    if (value != expected[i]) ++wrong;
  }
  return wrong;
}

std::vector<float> Seeded(const BenchTensor& tensor, float factor) {
  std::vector<float> values(tensor.numel());
  core::FillSeeded(tensor.fqn, kSeed, core::DType::kFloat32, 0, tensor.numel(),
                   values.data())
      .IgnoreError();
  for (float& value : values) value *= factor;
  return values;
}

// `repeats` timed repetitions of `once` on each side in turn, after
// kWarmup untimed ones; samples_us[s] are side s's.
absl::Status Alternate(
    std::vector<Side>& sides, int repeats,
    const std::function<absl::StatusOr<double>(const Side&, int)>& once,
    std::vector<std::vector<double>>* samples_us) {
  samples_us->assign(sides.size(), {});
  for (int i = 0; i < kWarmup + repeats; ++i) {
    for (size_t s = 0; s < sides.size(); ++s) {
      absl::StatusOr<double> us = once(sides[s], i);
      if (!us.ok()) {
        return absl::Status(
            us.status().code(),
            absl::StrCat(sides[s].name, ": ", us.status().message()));
      }
      if (i >= kWarmup) (*samples_us)[s].push_back(*us);
    }
  }
  return absl::OkStatus();
}

std::string Header(absl::string_view operation) {
  return absl::StrCat(
      "# ", operation, "\n",
      absl::StrFormat("#%11s %10s %8s %9s %7s  %10s %10s  %10s %10s  %10s "
                      "%6s",
                      "size", "count", "type", "mode", "repeats", "static.p50",
                      "static.p99", "etcd.p50", "etcd.p99", "delta.p50",
                      "#wrong"),
      "\n",
      absl::StrFormat("#%11s %10s %8s %9s %7s  %10s %10s  %10s %10s  %10s "
                      "%6s",
                      "(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)",
                      "(us)", "(us)", ""));
}

void PrintRow(const BenchTensor& tensor, absl::string_view mode,
              const std::vector<std::vector<double>>& samples_us,
              int64_t wrong) {
  const double static_p50 = Percentile(samples_us[0], 50);
  const double etcd_p50 = Percentile(samples_us[1], 50);
  std::printf(
      "%s\n",
      absl::StrFormat(
          "%12d %10d %8s %9s %7d  %10.1f %10.1f  %10.1f %10.1f  "
          "%+10.1f %6d",
          tensor.bytes, tensor.numel(), "float", mode, samples_us[0].size(),
          static_p50, Percentile(samples_us[0], 99), etcd_p50,
          Percentile(samples_us[1], 99), etcd_p50 - static_p50, wrong)
          .c_str());
  std::fflush(stdout);
}

absl::Status Run() {
  tests::EtcdCluster::Options etcd_options;
  etcd_options.members = absl::GetFlag(FLAGS_members);
  absl::StatusOr<std::unique_ptr<tests::EtcdCluster>> etcd =
      tests::EtcdCluster::Start(etcd_options);
  if (!etcd.ok()) return etcd.status();

  BenchCluster::Options options;
  options.nodes = absl::GetFlag(FLAGS_nodes);
  options.local_ranks = absl::GetFlag(FLAGS_local_ranks);
  if (options.nodes < 2) {
    return absl::InvalidArgumentError(
        "--nodes must be at least 2: a single node has no coordinator");
  }
  std::vector<Side> sides;
  absl::StatusOr<Side> fixed = StartSide("static", options);
  if (!fixed.ok()) return fixed.status();
  sides.push_back(*std::move(fixed));
  options.etcd = server::CoordinatorUrl{(*etcd)->client_addresses(), "bench"};
  absl::StatusOr<Side> elected = StartSide("etcd", options);
  if (!elected.ok()) return elected.status();
  sides.push_back(*std::move(elected));

  const BenchTensor tiny = TensorOfSize("tiny", kTinyBytes);
  const BenchTensor large =
      TensorOfSize("large", absl::GetFlag(FLAGS_large_bytes));
  for (const Side& side : sides) {
    client::CreateModelParams create;
    create.name = kModel;
    create.layout_json = LayoutJson({tiny, large});
    create.init.mutable_seeded()->set_seed(kSeed);
    if (absl::StatusOr<v1::Model> model = side.leader->CreateModel(create);
        !model.ok()) {
      return model.status();
    }
  }
  std::printf(
      "# etcd_hot_path_bench: two clusters of %d in-process summond x %d "
      "local ranks, static vs etcd (%d member(s), Debian's etcd), timed in "
      "alternation; calls to each leader over loopback TCP\n%s\n\n",
      options.nodes, options.local_ranks, absl::GetFlag(FLAGS_members),
      LoadAverageLine().c_str());

  const std::vector<float> tiny_seeded = Seeded(tiny, 1);
  std::printf("%s\n",
              Header("open+close of a tiny session (client-side)").c_str());
  const absl::string_view tiny_bytes(
      reinterpret_cast<const char*>(tiny_seeded.data()), tiny.bytes);
  for (TinyMode mode :
       {TinyMode::kReadOnly, TinyMode::kWritable, TinyMode::kWritten}) {
    std::vector<std::vector<double>> us;
    if (absl::Status timed = Alternate(
            sides, absl::GetFlag(FLAGS_tiny_repeats),
            [&](const Side& side, int) {
              return OpenCloseOnce(*side.leader, tiny, mode, tiny_bytes);
            },
            &us);
        !timed.ok()) {
      return timed;
    }
    int64_t wrong = 0;
    for (const Side& side : sides) {
      absl::StatusOr<int64_t> found =
          WrongElements(*side.leader, tiny, tiny_seeded);
      if (!found.ok()) return found.status();
      wrong += *found;
    }
    PrintRow(tiny, ModeName(mode), us, wrong);
  }

  // Two values taken in turn, so every writeback changes every byte.
  const std::vector<std::vector<float>> values = {Seeded(large, 2),
                                                  Seeded(large, 3)};
  const int large_iters = absl::GetFlag(FLAGS_large_iters);
  std::printf("\n%s\n", Header("writeback: open writable, write the "
                               "tensor, close with writeback")
                            .c_str());
  std::vector<std::vector<double>> us;
  if (absl::Status timed = Alternate(
          sides, large_iters,
          [&](const Side& side, int i) {
            const std::vector<float>& written = values[i % 2];
            return WritebackOnce(
                *side.leader, large,
                absl::string_view(reinterpret_cast<const char*>(written.data()),
                                  large.bytes));
          },
          &us);
      !timed.ok()) {
    return timed;
  }
  int64_t wrong = 0;
  for (const Side& side : sides) {
    absl::StatusOr<int64_t> found = WrongElements(
        *side.leader, large, values[(kWarmup + large_iters - 1) % 2]);
    if (!found.ok()) return found.status();
    wrong += *found;
  }
  PrintRow(large, "writeback", us, wrong);
  for (const Side& side : sides) {
    side.leader->DeleteModel(kModel).IgnoreError();
  }
  return wrong == 0
             ? absl::OkStatus()
             : absl::DataLossError(absl::StrCat(wrong, " wrong elements"));
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = summon::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "etcd_hot_path_bench: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
