#ifndef SUMMON_BENCH_BENCH_CLUSTER_H_
#define SUMMON_BENCH_BENCH_CLUSTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/server.h"

namespace summon::bench {

// summond running inside the benchmark process, so one binary measures the
// whole path (gRPC over loopback TCP, gather, shard store) without a
// separately started daemon. Each node gets its own temporary data directory
// and therefore its own shared-memory instance.
//
// Several nodes form a real cluster (the same `nodes` list; node 0 leads,
// or the node etcd elects); target() names node 0 (clients may talk to any
// node).
class BenchCluster {
 public:
  struct Options {
    // N: summond nodes (in-process servers forming one cluster over
    // loopback TCP and Gloo).
    int nodes = 1;
    // L: virtual ranks per node.
    int local_ranks = 4;
    // Shard placement (SummonServer::Spec::device); null: shared memory.
    std::shared_ptr<const server::ShardMemoryProvider> device;
    // SummonServer::Spec::device_communicator of every node; null: none.
    server::DeviceCommunicatorFactory device_communicator;
    // How long each node keeps closed sessions' copies and spare staging
    // (SummonServer::Spec's copy_pool_idle and staging_pool_idle).
    absl::Duration pool_idle = server::SummonServer::Spec().copy_pool_idle;
    // SummonServer::Spec::gather_parts (1: the gather copies, then
    // exchanges).
    int gather_parts = server::SummonServer::Spec().gather_parts;
    // SummonServer::Spec::staging_prefault (false: the writeback of a
    // session faults its staging itself, as before the pre-fault).
    bool staging_prefault = server::SummonServer::Spec().staging_prefault;
    // Set (and nodes > 1): the cluster's coordinator is etcd at these
    // endpoints (SummonServer::Spec::etcd), which elects the leader; unset:
    // the static mode, node 0 leads.
    std::optional<server::CoordinatorUrl> etcd;
    absl::Duration coordinator_lease_ttl =
        server::SummonServer::Spec().coordinator_lease_ttl;
  };

  // INVALID_ARGUMENT for local_ranks < 1; UNAVAILABLE when a data directory
  // cannot be made or a server does not start.
  static absl::StatusOr<std::unique_ptr<BenchCluster>> Start(
      const Options& options);

  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;
  // Shuts every node down, unlinks shared-memory segments still left (a run
  // that failed before deleting its models; each is reported on stderr) and
  // removes the data directories, so /dev/shm and /tmp are left clean.
  ~BenchCluster();

  // gRPC target of node 0, or of `node`.
  std::string target(int node = 0) const;
  int nodes() const { return static_cast<int>(nodes_.size()); }
  // W = nodes * local ranks.
  int world_size() const;

 private:
  struct Node {
    std::string data_dir;
    std::unique_ptr<server::SummonServer> server;
  };

  explicit BenchCluster(int local_ranks) : local_ranks_(local_ranks) {}

  const int local_ranks_;
  std::vector<Node> nodes_;
};

}  // namespace summon::bench

#endif  // SUMMON_BENCH_BENCH_CLUSTER_H_
