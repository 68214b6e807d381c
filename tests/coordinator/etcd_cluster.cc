#include "tests/coordinator/etcd_cluster.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/coordinator/etcd_client.h"
#include "tests/cluster/daemon_testing.h"

namespace summon::tests {

namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

std::string Url(int port) { return absl::StrCat("http://127.0.0.1:", port); }

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    Options options) {
  if (options.members < 1) {
    return absl::InvalidArgumentError("an etcd cluster needs a member");
  }
  if (access(options.etcd_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.etcd_binary,
                     " is missing: scripts/setup installs etcd-server"));
  }
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(std::move(options)));
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/summon-etcd-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  cluster->root_ = pattern;
  const int count = cluster->options_.members;
  absl::StatusOr<std::vector<int>> ports = PickFreePorts(2 * count);
  if (!ports.ok()) return ports.status();
  std::vector<std::string> peers;
  for (int i = 0; i < count; ++i) {
    Member member;
    member.name = absl::StrCat("m", i);
    member.client_port = (*ports)[2 * i];
    member.peer_port = (*ports)[2 * i + 1];
    member.data_dir = absl::StrCat(cluster->root_, "/", member.name);
    peers.push_back(absl::StrCat(member.name, "=", Url(member.peer_port)));
    cluster->members_.push_back(std::move(member));
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < count; ++i) {
    if (absl::Status spawned = cluster->Spawn(i); !spawned.ok()) {
      return spawned;
    }
  }
  if (absl::Status healthy = cluster->WaitHealthy(kStartTimeout);
      !healthy.ok()) {
    return healthy;
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (Member& member : members_) {
    member.proxy.reset();
    if (member.process.running()) member.process.Kill().IgnoreError();
  }
  if (!root_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
}

absl::Status EtcdCluster::Spawn(int index) {
  Member& member = members_[index];
  std::string log_dir = options_.log_dir;
  if (log_dir.empty()) {
    const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    log_dir = outputs != nullptr ? outputs : root_;
  }
  ChildProcess::Spec spec;
  // setpriv (util-linux) makes the member die with the test even when the
  // test is killed before its destructors run (a timeout): no etcd outlives
  // it. The death signal follows the spawning thread, so members are
  // started from the test's own thread.
  spec.argv = {
      "/usr/bin/setpriv",
      "--pdeathsig",
      "KILL",
      "--",
      options_.etcd_binary,
      "--name",
      member.name,
      "--data-dir",
      member.data_dir,
      "--listen-client-urls",
      Url(member.client_port),
      "--advertise-client-urls",
      Url(member.client_port),
      "--listen-peer-urls",
      Url(member.peer_port),
      "--initial-advertise-peer-urls",
      Url(member.peer_port),
      "--initial-cluster",
      initial_cluster_,
      "--initial-cluster-state",
      "new",
      "--initial-cluster-token",
      absl::StrCat("summon-test-", getpid()),
      "--logger",
      "zap",
      "--log-level",
      "warn",
  };
  // Never the system's etcd settings (ETCD_* variables) in a test.
  spec.env = {{"ETCD_DATA_DIR", ""}, {"ETCD_NAME", ""}};
  spec.log_path = absl::StrCat(log_dir, "/etcd-", member.name, ".log");
  absl::StatusOr<ChildProcess> process = ChildProcess::Spawn(spec);
  if (!process.ok()) return process.status();
  member.process = std::move(*process);
  return absl::OkStatus();
}

std::string EtcdCluster::client_address(int member) const {
  return absl::StrCat("127.0.0.1:", members_[member].client_port);
}

std::vector<std::string> EtcdCluster::client_addresses() const {
  std::vector<std::string> addresses;
  for (int i = 0; i < members(); ++i) addresses.push_back(client_address(i));
  return addresses;
}

absl::StatusOr<TcpProxy*> EtcdCluster::Proxy(int member) {
  Member& m = members_[member];
  if (m.proxy == nullptr) {
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(m.client_port);
    if (!proxy.ok()) return proxy.status();
    m.proxy = std::move(*proxy);
  }
  return m.proxy.get();
}

bool EtcdCluster::running(int member) const {
  return members_[member].process.running();
}

absl::Status EtcdCluster::Kill(int member) {
  absl::StatusOr<ExitStatus> killed = members_[member].process.Kill();
  return killed.status();
}

absl::Status EtcdCluster::Restart(int member) {
  if (running(member)) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd member ", member, " is running"));
  }
  return Spawn(member);
}

absl::Status EtcdCluster::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int i = 0; i < members(); ++i) {
    if (!running(i)) continue;
    server::EtcdClient client(server::EtcdClient::Options{
        {client_address(i)}, absl::Seconds(1), nullptr});
    etcdserverpb::RangeRequest health;
    health.set_key("health");  // What `etcdctl endpoint health` reads.
    while (true) {
      if (std::optional<ExitStatus> ended = members_[i].process.PollExit()) {
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", i, " exited: ", ExitStatusText(*ended)));
      }
      absl::StatusOr<etcdserverpb::RangeResponse> read = client.Range(health);
      if (read.ok()) break;
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", i, " is not healthy after ",
            absl::FormatDuration(timeout), ": ", read.status().ToString()));
      }
      absl::SleepFor(kPollInterval);
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::tests
