// The bounded soak of issue 5: many concurrent clients (64 by default) open,
// read, write and close sessions on an in-process 2-node x 2-rank cluster for
// --duration_s seconds. Prints operations per second and latency percentiles
// per operation kind, and asserts: no unexpected error and no hang, no lost
// or torn write, and, once the last client has left, no open session and the
// process's memory, the nodes' shared-memory segments and the open file
// descriptors back to their baseline.

#include <malloc.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_cluster.h"
#include "client/lib/summon_client.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"
#include "spdlog/spdlog.h"
#include "summon/v1/summon.pb.h"
#include "tests/load/soak_client.h"
#include "tests/load/soak_model.h"
#include "tests/load/soak_report.h"

ABSL_FLAG(int32_t, duration_s, 60,
          "Seconds during which clients start new sessions (the issue's soak "
          "is 60 s; the Bazel target passes a shorter run).");
ABSL_FLAG(int32_t, clients, 64, "Concurrent clients, each with its own unit.");

namespace summon::load {
namespace {

namespace fs = std::filesystem;

constexpr char kModel[] = "soak";
constexpr uint64_t kSeed = 11;
constexpr int kNodes = 2;
constexpr int kLocalRanks = 2;
constexpr int kHotUnits = 4;
constexpr int kCallTimeoutSeconds = 30;
constexpr absl::Duration kCallTimeout = absl::Seconds(kCallTimeoutSeconds);
// After --duration_s each client finishes the session in flight: at most
// six calls of kCallTimeout each (open, read, write, read, close, plus the
// handle's abort), and one more for slack. Longer than that is a hang.
constexpr absl::Duration kDrainBound = absl::Seconds(7 * kCallTimeoutSeconds);
// Closed connections and exited threads are released asynchronously (gRPC
// notices a peer's close on its next poll), so the resource checks wait up
// to this long for the process to settle.
constexpr absl::Duration kSettleTimeout = absl::Seconds(30);
// RSS is measured after malloc_trim(0), so freed heap memory is returned,
// but glibc still keeps per-thread arenas' top chunks and the stacks of
// exited threads (its stack cache holds up to 40 MiB), and gRPC keeps
// per-server thread pools and completion queues it grew under load. None of
// that grows with the run's length, while a leak of a session's copies or of
// one buffer per call would (a 20 s run moves hundreds of MiB through
// reads, writes and gathers).
constexpr int64_t kRssToleranceBytes = int64_t{64} << 20;
// Every client's channel is destroyed before the check, so each of its
// connections is closed on both ends; the slack covers descriptors gRPC opens
// lazily for itself (e.g. a wakeup fd of a poller thread started under load).
constexpr int kFdTolerance = 4;

// BenchCluster creates each node's data directory as
// $TMPDIR/summon_bench-XXXXXX and does not expose it. The test points TMPDIR
// at a fresh directory of its own before starting the cluster, so the
// directories found there are exactly its nodes' and give their shared-memory
// instances (server::InstanceForDataDir).
absl::StatusOr<std::string> UsePrivateTmpDir() {
  const char* parent = std::getenv("TEST_TMPDIR");
  if (parent == nullptr || *parent == '\0') parent = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(
      parent != nullptr && *parent != '\0' ? parent : "/tmp", "/soak-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr ||
      setenv("TMPDIR", pattern.c_str(), /*overwrite=*/1) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot use ", pattern, " as TMPDIR: ", strerror(errno)));
  }
  return pattern;
}

std::vector<std::string> NodeInstances(const std::string& tmp_dir) {
  std::vector<std::string> instances;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmp_dir)) {
    if (absl::StartsWith(entry.path().filename().string(), "summon_bench-")) {
      instances.push_back(server::InstanceForDataDir(entry.path().string()));
    }
  }
  return instances;
}

struct Resources {
  int64_t rss_bytes = 0;
  int open_fds = 0;
  // Every node's shared-memory segments.
  std::vector<std::string> segments;

  std::string ToString() const {
    return absl::StrCat("RSS ", rss_bytes >> 20, " MiB, ", open_fds,
                        " open fds, ", segments.size(),
                        " shared-memory segments");
  }
};

// VmRSS of /proc/self/status; -1 when it cannot be read.
int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    // "VmRSS:	  123456 kB"
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    int64_t kib = -1;
    std::istringstream(line.substr(std::strlen("VmRSS:"))) >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

int OpenFds() {
  int count = 0;
  for ([[maybe_unused]] const fs::directory_entry& entry :
       fs::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

Resources Measure(const std::vector<std::string>& instances) {
  Resources resources;
  // Freed heap memory goes back to the system first, so RSS counts what is
  // in use.
  malloc_trim(0);
  resources.rss_bytes = RssBytes();
  resources.open_fds = OpenFds();
  for (const std::string& instance : instances) {
    for (std::string& segment : server::ShardStore::ListSegments(instance)) {
      resources.segments.push_back(std::move(segment));
    }
  }
  return resources;
}

bool Settled(const Resources& now, const Resources& baseline) {
  return now.rss_bytes <= baseline.rss_bytes + kRssToleranceBytes &&
         now.open_fds <= baseline.open_fds + kFdTolerance &&
         now.segments == baseline.segments;
}

struct SoakRun {
  ClientReport report;
  // Peaks sampled while clients ran, to show what the final check undoes.
  int peak_fds = 0;
  int64_t peak_rss_bytes = 0;
};

// Runs every client until `options.end` and merges their reports. A client
// still busy kDrainBound after the end is a hang: its operation is printed
// and the process aborts (the threads cannot be abandoned safely).
SoakRun RunClients(int clients, const SoakModel& model,
                   const SoakOptions& options) {
  SoakRun run;
  std::vector<ClientProgress> progress(clients);
  std::vector<ClientReport> reports(clients);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(
        [&, i] { reports[i] = RunSoakClient(i, model, options, progress[i]); });
  }
  const absl::Time give_up = options.end + kDrainBound;
  for (int i = 0; i < clients; ++i) {
    while (!progress[i].done.load()) {
      run.peak_fds = std::max(run.peak_fds, OpenFds());
      run.peak_rss_bytes = std::max(run.peak_rss_bytes, RssBytes());
      if (absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(50));
        continue;
      }
      const int64_t now_ms = absl::ToUnixMillis(absl::Now());
      for (int c = 0; c < clients; ++c) {
        const int op = progress[c].op.load();
        if (progress[c].done.load()) continue;
        std::fprintf(stderr, "soak: client %d hangs in %s for %.1f s\n", c,
                     op < 0 ? "(between calls)"
                            : std::string(OpName(static_cast<Op>(op))).c_str(),
                     (now_ms - progress[c].op_started_unix_ms.load()) / 1e3);
      }
      std::fprintf(stderr, "soak: clients still busy %s after the end\n",
                   absl::FormatDuration(kDrainBound).c_str());
      std::abort();
    }
  }
  for (std::thread& thread : threads) thread.join();
  run.report = MergeReports(std::move(reports));
  return run;
}

// Every tensor must be seeded + the sum of the deltas of the writebacks that
// succeeded on it, and its unit's generation must have moved once per
// writeback: the writebacks' new generations are exactly initial + 1..n.
void ExpectNoLostWrite(const client::SummonClient& admin,
                       const SoakModel& model, const v1::Model& created,
                       const std::vector<Writeback>& writebacks) {
  const int tensors = static_cast<int>(model.tensors().size());
  std::vector<double> delta_sums(tensors, 0);
  std::vector<std::vector<uint64_t>> generations(tensors);
  for (const Writeback& writeback : writebacks) {
    delta_sums[writeback.tensor] += writeback.delta;
    generations[writeback.tensor].push_back(writeback.generation);
  }
  absl::StatusOr<v1::Model> described = admin.DescribeModel(kModel);
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->units_size(), tensors);
  v1::SessionOptions options;
  options.set_writeback(false);
  for (int t = 0; t < tensors; ++t) {
    ASSERT_EQ(described->units(t).fqn(), model.tensors()[t].unit);
    const uint64_t initial = created.units(t).generation();
    std::sort(generations[t].begin(), generations[t].end());
    std::vector<uint64_t> expected(generations[t].size());
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = initial + 1 + i;
    EXPECT_EQ(generations[t], expected) << model.tensors()[t].unit;
    EXPECT_EQ(described->units(t).generation(), initial + expected.size())
        << model.tensors()[t].unit;
    options.mutable_params()->add_fqns(model.tensors()[t].fqn);
  }
  absl::StatusOr<v1::Session> session = admin.OpenSession(kModel, options);
  ASSERT_TRUE(session.ok()) << session.status();
  for (int t = 0; t < tensors; ++t) {
    const SoakModel::Tensor& tensor = model.tensors()[t];
    client::ReadTensorParams params;
    params.tensor = {session->id(), tensor.fqn, false};
    absl::StatusOr<client::TensorData> data = admin.ReadTensor(params);
    ASSERT_TRUE(data.ok()) << data.status();
    const absl::StatusOr<double> delta = UniformDelta(tensor, 0, data->data);
    ASSERT_TRUE(delta.ok()) << delta.status();
    EXPECT_EQ(*delta, delta_sums[t])
        << tensor.fqn << " after " << generations[t].size() << " writebacks";
  }
  EXPECT_TRUE(admin.CloseSession(session->id()).ok());
}

void ExpectNoSessions(const std::shared_ptr<grpc::Channel>& channel,
                      int clients) {
  for (int i = 0; i < clients; ++i) {
    client::ClientOptions options;
    options.principal = PrincipalOf(i);
    options.timeout = kCallTimeout;
    absl::StatusOr<v1::ListSessionsResponse> listed =
        client::SummonClient(channel, options).ListSessions();
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->sessions_size(), 0)
        << PrincipalOf(i) << ": " << listed->ShortDebugString();
  }
  client::ClientOptions options;
  options.timeout = kCallTimeout;
  absl::StatusOr<v1::ListModelsResponse> models =
      client::SummonClient(channel, options).ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->models_size(), 1);
  EXPECT_EQ(models->models(0).open_sessions(), 0);
}

TEST(SoakTest, ConcurrentClientsLoseNoWriteAndLeaveNothingBehind) {
  const int clients = absl::GetFlag(FLAGS_clients);
  const absl::Duration duration =
      absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  std::printf(
      "soak: %d clients for %s on %d nodes x %d ranks. The issue's full 60 s "
      "soak: bazel test //tests/load:soak_test --test_arg=--duration_s=60 "
      "--test_output=streamed\n",
      clients, absl::FormatDuration(duration).c_str(), kNodes, kLocalRanks);

  absl::StatusOr<std::string> tmp_dir = UsePrivateTmpDir();
  ASSERT_TRUE(tmp_dir.ok()) << tmp_dir.status();
  bench::BenchCluster::Options cluster_options;
  cluster_options.nodes = kNodes;
  cluster_options.local_ranks = kLocalRanks;
  // The final check wants the baseline's RSS, descriptors and segments back:
  // kept copies (memfds) and spare staging must lapse within kSettleTimeout.
  cluster_options.pool_idle = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<bench::BenchCluster>> cluster =
      bench::BenchCluster::Start(cluster_options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<std::string> instances = NodeInstances(*tmp_dir);
  ASSERT_EQ(instances.size(), kNodes);
  absl::StatusOr<SoakModel> model = SoakModel::Make(clients, kHotUnits, kSeed);
  ASSERT_TRUE(model.ok()) << model.status();

  // The test's own connection lives from before the baseline to after the
  // last check, so it counts the same in both.
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      (*cluster)->target(), grpc::InsecureChannelCredentials());
  client::ClientOptions admin_options;
  admin_options.timeout = kCallTimeout;
  const client::SummonClient admin(channel, admin_options);
  client::CreateModelParams create;
  create.name = kModel;
  create.layout_json = model->LayoutJson();
  create.init.mutable_seeded()->set_seed(kSeed);
  absl::StatusOr<v1::Model> created = admin.CreateModel(create);
  ASSERT_TRUE(created.ok()) << created.status();
  const Resources baseline = Measure(instances);
  std::printf("soak: baseline %s\n", baseline.ToString().c_str());

  // Clients are spread over the nodes (followers forward to the leader);
  // every session gathers from and writes back to both nodes.
  SoakOptions options;
  for (int node = 0; node < (*cluster)->nodes(); ++node) {
    options.targets.push_back((*cluster)->target(node));
  }
  options.model = kModel;
  options.call_timeout = kCallTimeout;
  const absl::Time start = absl::Now();
  options.end = start + duration;
  const SoakRun run = RunClients(clients, *model, options);
  const ClientReport& report = run.report;
  const absl::Duration elapsed = absl::Now() - start;
  std::printf("soak: %d clients, %.1f s until the last one left\n%s", clients,
              absl::ToDoubleSeconds(elapsed),
              FormatSoakTable(report, elapsed).c_str());
  std::printf("soak: peak during load RSS %lld MiB, %d open fds\n",
              static_cast<long long>(run.peak_rss_bytes >> 20), run.peak_fds);

  EXPECT_EQ(TotalUnexpected(report), 0) << absl::StrJoin(report.errors, "\n");
  ExpectNoSessions(channel, clients);
  ExpectNoLostWrite(admin, *model, *created, report.writebacks);
  ExpectNoSessions(channel, clients);

  Resources settled = Measure(instances);
  const absl::Time settle_deadline = absl::Now() + kSettleTimeout;
  while (!Settled(settled, baseline) && absl::Now() < settle_deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    settled = Measure(instances);
  }
  std::printf("soak: after the last client %s\n", settled.ToString().c_str());
  EXPECT_LE(settled.rss_bytes, baseline.rss_bytes + kRssToleranceBytes);
  EXPECT_LE(settled.open_fds, baseline.open_fds + kFdTolerance);
  EXPECT_EQ(settled.segments, baseline.segments);

  EXPECT_TRUE(admin.DeleteModel(kModel).ok());
  cluster->reset();
  std::error_code ignored;
  fs::remove_all(*tmp_dir, ignored);
}

}  // namespace
}  // namespace summon::load

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  // The daemons' per-session info lines would drown the table.
  spdlog::set_level(spdlog::level::warn);
  return RUN_ALL_TESTS();
}
