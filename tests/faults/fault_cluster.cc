#include "tests/faults/fault_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"
#include "tests/cluster/daemon_testing.h"

namespace summon::tests {
namespace {

namespace health = ::grpc::health::v1;

// summond exits with 14 (UNAVAILABLE) when its port is taken: another
// process won the race for a port picked as free; the start is retried.
constexpr int kPortTakenExitCode = 14;
constexpr int kStartAttempts = 3;
constexpr absl::Duration kServingTimeout = absl::Seconds(20);
constexpr absl::Duration kExitTimeout = absl::Seconds(10);
constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

// Fast reconnects and no subchannel shared with other channels: a channel
// to a restarted daemon must not wait out the backoff of a dead one.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  arguments.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   arguments);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultCluster>> FaultCluster::Start(
    Options options) {
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    auto cluster = std::unique_ptr<FaultCluster>(new FaultCluster(options));
    absl::StatusOr<std::vector<int>> ports = PickFreePorts(options.nodes);
    if (!ports.ok()) return ports.status();
    last = cluster->Prepare(*ports);
    for (int node = 0; node < options.nodes && last.ok(); ++node) {
      auto armed = options.fault_points.find(node);
      last = cluster->StartNode(
          node, armed == options.fault_points.end() ? "" : armed->second);
    }
    if (last.ok()) last = cluster->WaitServing(kServingTimeout);
    if (last.ok()) return cluster;
    const bool port_taken = absl::StrContains(
        last.message(),
        absl::StrCat("exited with status ", kPortTakenExitCode));
    cluster->Stop().IgnoreError();
    if (!port_taken) break;
  }
  return last;
}

FaultCluster::~FaultCluster() {
  if (absl::Status stopped = Stop(); !stopped.ok()) {
    std::cerr << "FaultCluster: " << stopped << "\n";
  }
}

absl::Duration FaultCluster::failure_timeout() const {
  return std::max(options_.heartbeat * 3, absl::Seconds(1));
}

absl::Status FaultCluster::Prepare(const std::vector<int>& ports) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/faults-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  work_dir_ = pattern;
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  log_dir_ = outputs != nullptr ? outputs : work_dir_;
  for (int port : ports) addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  processes_.resize(options_.nodes);
  clients_.resize(options_.nodes);
  for (int node = 0; node < options_.nodes; ++node) {
    data_dirs_.push_back(absl::StrCat(work_dir_, "/node", node));
    std::filesystem::create_directories(data_dirs_.back());
    std::filesystem::remove(LogPath(node));
  }
  return absl::OkStatus();
}

std::string FaultCluster::LogPath(int node) const {
  return absl::StrCat(log_dir_, "/", options_.log_prefix, "node", node, ".log");
}

absl::Status FaultCluster::StartNode(int node, absl::string_view fault_point) {
  if (running(node)) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " is already running"));
  }
  ChildProcess::Spec spec;
  spec.argv = {
      RunfilePath("server/summond"),
      "--insecure-local",
      "--nodes=" + absl::StrJoin(addresses_, ","),
      "--coordinator=static",
      absl::StrCat("--node-rank=", node),
      absl::StrCat("--local-ranks=", options_.local_ranks),
      "--data-dir=" + data_dirs_[node],
      absl::StrCat("--heartbeat-ms=",
                   absl::ToInt64Milliseconds(options_.heartbeat)),
      absl::StrCat("--collective-timeout-ms=",
                   absl::ToInt64Milliseconds(options_.collective_timeout)),
      "--log-level=info",
  };
  // Empty removes a fault point the test's own environment might carry.
  spec.env["SUMMON_FAULT_POINT"] = std::string(fault_point);
  spec.log_path = LogPath(node);
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(spec);
  if (!child.ok()) return child.status();
  processes_[node] = *std::move(child);
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  clients_[node] = std::make_unique<client::SummonClient>(
      FreshChannel(addresses_[node]), client_options);
  return absl::OkStatus();
}

absl::Status FaultCluster::Kill(int node) {
  absl::StatusOr<ExitStatus> killed = processes_[node].Kill();
  return killed.status();
}

absl::Status FaultCluster::Pause(int node) {
  return processes_[node].Signal(SIGSTOP);
}

absl::Status FaultCluster::Resume(int node) {
  return processes_[node].Signal(SIGCONT);
}

absl::StatusOr<ExitStatus> FaultCluster::WaitExit(int node,
                                                  absl::Duration timeout) {
  return processes_[node].WaitExit(timeout);
}

absl::Status FaultCluster::CheckAlive() {
  std::vector<std::string> ended;
  for (int node = 0; node < options_.nodes; ++node) {
    if (!running(node)) continue;
    if (std::optional<ExitStatus> exited = processes_[node].PollExit()) {
      ended.push_back(
          absl::StrCat("summond of node ", node, " ", ExitStatusText(*exited)));
    }
  }
  if (ended.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrJoin(ended, "; "));
}

absl::StatusOr<health::HealthCheckResponse::ServingStatus> FaultCluster::Health(
    int node) const {
  return CheckHealth(FreshChannel(addresses_[node]));
}

absl::Status FaultCluster::WaitServing(absl::Duration timeout) {
  std::vector<std::string> running_addresses;
  for (int node = 0; node < options_.nodes; ++node) {
    running_addresses.push_back(addresses_[node]);
  }
  return tests::WaitServing(running_addresses, timeout, FreshChannel,
                            [this] { return CheckAlive(); });
}

absl::Status FaultCluster::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  absl::Status first;
  for (int node = 0; node < options_.nodes; ++node) {
    if (running(node)) processes_[node].Signal(SIGCONT).IgnoreError();
  }
  bool every_node_runs = CheckAlive().ok();
  for (int node = 0; node < options_.nodes; ++node) {
    every_node_runs = every_node_runs && running(node);
  }
  if (every_node_runs && WaitServing(absl::Seconds(5)).ok()) {
    absl::StatusOr<v1::ListModelsResponse> models = client(0).ListModels();
    first.Update(models.status());
    if (models.ok()) {
      for (const v1::ModelSummary& model : models->models()) {
        first.Update(client(0).DeleteModel(model.name()).status());
      }
    }
  }
  // A daemon waits out its shutdown grace while a client holds an idle
  // channel to it: the clients go first.
  clients_.clear();
  for (ChildProcess& process : processes_) {
    if (process.running()) process.Signal(SIGTERM).IgnoreError();
  }
  for (int node = 0; node < options_.nodes; ++node) {
    if (!running(node)) continue;
    absl::StatusOr<ExitStatus> exited = processes_[node].WaitExit(kExitTimeout);
    if (!exited.ok()) {
      processes_[node].Kill().IgnoreError();
      first.Update(absl::DeadlineExceededError(
          absl::StrCat("summond of node ", node, " did not exit within ",
                       absl::FormatDuration(kExitTimeout), " of SIGTERM")));
    } else if (exited->code != 0) {
      first.Update(absl::InternalError(
          absl::StrCat("summond of node ", node, " ", ExitStatusText(*exited),
                       " after SIGTERM")));
    }
  }
  for (int node = 0; node < static_cast<int>(data_dirs_.size()); ++node) {
    const std::vector<std::string> left = server::ShardStore::ListSegments(
        server::InstanceForDataDir(data_dirs_[node]));
    if (!left.empty()) {
      first.Update(absl::InternalError(absl::StrCat(
          "node ", node,
          " left shared memory behind: ", absl::StrJoin(left, ", "))));
    }
    for (const std::string& segment : left) shm_unlink(segment.c_str());
  }
  if (!work_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(work_dir_, ignored);
  }
  return first;
}

}  // namespace summon::tests
