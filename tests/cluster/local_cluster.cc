#include "tests/cluster/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"
#include "tests/cluster/daemon_testing.h"

extern char** environ;

namespace summon::tests {
namespace {

namespace health = ::grpc::health::v1;

// summond exits with the status code number when it cannot start; 14
// (UNAVAILABLE) is a taken port: another process won the race for a port
// picked as free, so the start is retried on new ports.
constexpr int kPortTakenExitCode = 14;
constexpr int kStartAttempts = 3;
constexpr absl::Duration kServingTimeout = absl::Seconds(20);
constexpr absl::Duration kExitTimeout = absl::Seconds(10);
constexpr absl::Duration kPollInterval = absl::Milliseconds(25);

// The exit code of `pid` once it exited (-1 for a signal), or nullopt while
// it runs.
std::optional<int> ExitCodeIfExited(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    Options options) {
  if (options.started.empty()) {
    for (int node = 0; node < options.nodes; ++node) {
      options.started.push_back(node);
    }
  }
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster(options));
    absl::StatusOr<std::vector<int>> ports = PickFreePorts(options.nodes);
    if (!ports.ok()) return ports.status();
    last = cluster->Spawn(*ports);
    if (last.ok() &&
        static_cast<int>(options.started.size()) == options.nodes) {
      last = cluster->WaitServing(absl::Now() + kServingTimeout);
    }
    if (last.ok()) return cluster;
    const bool port_taken = absl::StrContains(
        last.message(),
        absl::StrCat("exited with status ", kPortTakenExitCode));
    cluster->Stop().IgnoreError();
    if (!port_taken) break;
  }
  return last;
}

LocalCluster::~LocalCluster() {
  if (absl::Status stopped = Stop(); !stopped.ok()) {
    std::cerr << "LocalCluster: " << stopped << "\n";
  }
}

absl::Status LocalCluster::Spawn(const std::vector<int>& ports) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/cluster-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  work_dir_ = pattern;
  for (int port : ports) addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  pids_.assign(options_.nodes, -1);
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  for (int node = 0; node < options_.nodes; ++node) {
    data_dirs_.push_back(absl::StrCat(work_dir_, "/node", node));
    std::filesystem::create_directories(data_dirs_.back());
    clients_.push_back(std::make_unique<client::SummonClient>(addresses_[node],
                                                              client_options));
  }
  for (int node : options_.started) {
    if (absl::Status status = SpawnNode(node); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::SpawnNode(int node) {
  std::vector<std::string> args = {
      RunfilePath("server/summond"),
      "--insecure-local",
      "--nodes=" + absl::StrJoin(addresses_, ","),
      absl::StrCat("--node-rank=", node),
      absl::StrCat("--local-ranks=", options_.local_ranks),
      "--data-dir=" + data_dirs_[node],
      absl::StrCat("--collective-timeout-ms=",
                   absl::ToInt64Milliseconds(options_.collective_timeout)),
      "--heartbeat-ms=500",
      "--log-level=warn",
  };
  if (!options_.checkpoint_root.empty()) {
    args.push_back("--checkpoint-root=" + options_.checkpoint_root);
  }
  const std::string& coordinator = options_.node_coordinators.empty()
                                       ? options_.coordinator
                                       : options_.node_coordinators[node];
  if (!coordinator.empty()) {
    args.push_back("--coordinator=" + coordinator);
    args.push_back("--coordinator-lease-ttl=" +
                   absl::FormatDuration(options_.coordinator_lease_ttl));
  } else if (options_.nodes > 1) {
    // summond refuses a cluster that names no coordinator.
    args.push_back("--coordinator=static");
  }
  args.insert(args.end(), options_.extra_flags.begin(),
              options_.extra_flags.end());
  // A single node is no cluster: it serves on --listen, not its --nodes
  // entry.
  if (options_.nodes == 1) args.push_back("--listen=" + addresses_[node]);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    env.push_back(*entry);
  }
  std::string fault = "SUMMON_FAULT_POINT=" + options_.fault_point;
  if (!options_.fault_point.empty()) env.push_back(fault.data());
  std::string broken = "SUMMON_BROKEN_FENCE=" + options_.broken_fence;
  if (!options_.broken_fence.empty()) env.push_back(broken.data());
  std::string fault_file = "SUMMON_FAULT_FILE=" + this->fault_file(node);
  if (options_.fault_files) env.push_back(fault_file.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  if (const int error =
          posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), env.data());
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", argv[0], ": ", strerror(error)));
  }
  pids_[node] = pid;
  return absl::OkStatus();
}

std::string LocalCluster::fault_file(int node) const {
  return absl::StrCat(work_dir_, "/fault-node", node);
}

absl::Status LocalCluster::Kill(int node) {
  if (pids_[node] < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " is not running"));
  }
  kill(pids_[node], SIGKILL);
  waitpid(pids_[node], nullptr, 0);
  pids_[node] = -1;
  return absl::OkStatus();
}

absl::Status LocalCluster::Signal(int node, int signal) {
  if (pids_[node] < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " is not running"));
  }
  kill(pids_[node], signal);
  if (signal != SIGSTOP) return absl::OkStatus();
  // Until one thread takes the queued stop the others keep answering RPCs;
  // waitpid reports the stop once every thread has stopped.
  // WNOWAIT: an exit stays for CheckAlive to reap.
  siginfo_t info{};
  if (waitid(P_PID, pids_[node], &info, WSTOPPED | WEXITED | WNOWAIT) != 0 ||
      info.si_code != CLD_STOPPED) {
    return absl::UnavailableError(
        absl::StrCat("summond of node ", node, " ended instead of stopping"));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartNode(int node) {
  if (pids_[node] >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " is running"));
  }
  if (absl::Status status = SpawnNode(node); !status.ok()) return status;
  // A fresh channel: the old one's reconnect backoff would delay the calls.
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  clients_[node] =
      std::make_unique<client::SummonClient>(addresses_[node], client_options);
  return WaitServing(absl::Now() + kServingTimeout);
}

absl::Status LocalCluster::CheckAlive() {
  for (int node = 0; node < options_.nodes; ++node) {
    if (pids_[node] < 0) continue;
    if (std::optional<int> code = ExitCodeIfExited(pids_[node])) {
      pids_[node] = -1;
      return absl::UnavailableError(absl::StrCat(
          "summond of node ", node, " exited with status ", *code));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<health::HealthCheckResponse::ServingStatus> LocalCluster::Health(
    int node) const {
  return CheckHealth(grpc::CreateChannel(addresses_[node],
                                         grpc::InsecureChannelCredentials()));
}

absl::Status LocalCluster::WaitServing(absl::Time deadline) {
  return tests::WaitServing(
      addresses_, deadline - absl::Now(),
      [](const std::string& address) {
        return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      },
      [this] { return CheckAlive(); });
}

absl::Status LocalCluster::Terminate() {
  absl::Status first;
  for (pid_t pid : pids_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  const absl::Time give_up = absl::Now() + kExitTimeout;
  for (int node = 0; node < options_.nodes; ++node) {
    if (pids_[node] < 0) continue;
    std::optional<int> code;
    while (!(code = ExitCodeIfExited(pids_[node])) && absl::Now() < give_up) {
      absl::SleepFor(kPollInterval);
    }
    if (!code.has_value()) {
      kill(pids_[node], SIGKILL);
      waitpid(pids_[node], nullptr, 0);
      first.Update(absl::DeadlineExceededError(
          absl::StrCat("summond of node ", node, " did not exit within ",
                       absl::FormatDuration(kExitTimeout), " of SIGTERM")));
    } else if (*code != 0) {
      first.Update(absl::InternalError(absl::StrCat("summond of node ", node,
                                                    " exited with status ",
                                                    *code, " after SIGTERM")));
    }
    pids_[node] = -1;
  }
  return first;
}

absl::Status LocalCluster::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  absl::Status first;
  const bool serving =
      static_cast<int>(options_.started.size()) == options_.nodes &&
      CheckAlive().ok() &&
      Health(0).value_or(health::HealthCheckResponse::UNKNOWN) ==
          health::HealthCheckResponse::SERVING;
  if (serving) {
    absl::StatusOr<v1::ListModelsResponse> models = client(0).ListModels();
    first.Update(models.status());
    if (models.ok()) {
      for (const v1::ModelSummary& model : models->models()) {
        first.Update(client(0).DeleteModel(model.name()).status());
      }
    }
  }
  // A daemon waits out its whole shutdown grace (5 s) while a client holds
  // an idle channel to it; the clients go first so it stops at once.
  clients_.clear();
  first.Update(Terminate());
  for (int node = 0; node < static_cast<int>(data_dirs_.size()); ++node) {
    const std::string instance = server::InstanceForDataDir(data_dirs_[node]);
    const std::vector<std::string> left =
        server::ShardStore::ListSegments(instance);
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
