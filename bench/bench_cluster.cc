#include "bench/bench_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"

namespace summon::bench {
namespace {

constexpr absl::Duration kReadyTimeout = absl::Seconds(30);

// A port free right now: bound to port 0, read back, released.
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot find a free port: ", strerror(errno)));
  }
  close(fd);
  return ntohs(address.sin_port);
}

absl::StatusOr<std::string> MakeDataDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(
      tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/summon_bench-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create a data directory ", pattern, ": ", strerror(errno)));
  }
  return pattern;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(
    const Options& options) {
  if (options.local_ranks < 1 || options.nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes and local ranks must be at least 1, got ",
                     options.nodes, " and ", options.local_ranks));
  }
  std::unique_ptr<BenchCluster> cluster(new BenchCluster(options.local_ranks));
  std::vector<std::string> addresses;
  if (options.nodes > 1) {
    for (int n = 0; n < options.nodes; ++n) {
      absl::StatusOr<int> port = FreePort();
      if (!port.ok()) return port.status();
      addresses.push_back(absl::StrCat("127.0.0.1:", *port));
    }
  }
  for (int n = 0; n < options.nodes; ++n) {
    absl::StatusOr<std::string> data_dir = MakeDataDir();
    if (!data_dir.ok()) return data_dir.status();
    // Recorded before the server starts, so the destructor cleans the
    // directory even when Start fails.
    Node& node = cluster->nodes_.emplace_back();
    node.data_dir = *std::move(data_dir);
    server::SummonServer::Spec spec;
    spec.local_ranks = options.local_ranks;
    spec.data_dir = node.data_dir;
    spec.nodes = addresses;
    spec.node_rank = n;
    spec.device = options.device;
    spec.device_communicator = options.device_communicator;
    spec.copy_pool_idle = options.pool_idle;
    spec.staging_pool_idle = options.pool_idle;
    spec.gather_parts = options.gather_parts;
    spec.staging_prefault = options.staging_prefault;
    if (options.nodes > 1) spec.etcd = options.etcd;
    spec.coordinator_lease_ttl = options.coordinator_lease_ttl;
    absl::StatusOr<std::unique_ptr<server::SummonServer>> server =
        server::SummonServer::Start(std::move(spec));
    if (!server.ok()) return server.status();
    node.server = *std::move(server);
  }
  const absl::Time deadline = absl::Now() + kReadyTimeout;
  for (const Node& node : cluster->nodes_) {
    while (!node.server->ready()) {
      if (absl::Now() > deadline) {
        return absl::UnavailableError("the benchmark cluster did not form");
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return cluster;
}

BenchCluster::~BenchCluster() {
  for (Node& node : nodes_) {
    if (node.server != nullptr) node.server->Shutdown();
    node.server.reset();
    const std::string instance = server::InstanceForDataDir(node.data_dir);
    for (const std::string& segment :
         server::ShardStore::ListSegments(instance)) {
      std::fprintf(stderr, "summon_bench: unlinking leftover segment %s\n",
                   segment.c_str());
      shm_unlink(segment.c_str());
    }
    std::error_code error;
    std::filesystem::remove_all(node.data_dir, error);
  }
}

std::string BenchCluster::target(int node) const {
  const server::SummonServer& server = *nodes_[node].server;
  // A cluster node's address is its --nodes entry (listen_address unused).
  return server.spec().nodes.empty() ? server.address()
                                     : server.spec().nodes[node];
}

int BenchCluster::world_size() const {
  return static_cast<int>(nodes_.size()) * local_ranks_;
}

}  // namespace summon::bench
