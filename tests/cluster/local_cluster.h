#ifndef SUMMON_TESTS_CLUSTER_LOCAL_CLUSTER_H_
#define SUMMON_TESTS_CLUSTER_LOCAL_CLUSTER_H_

// A cluster of real summond processes on loopback, as an operator starts
// one: the //server:summond binary from the test's runfiles, one process per
// node, `--nodes` with fixed free ports, a fresh data directory per node.
// Tests reach the daemons only through gRPC (SummonClient and
// grpc.health.v1).

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/lib/summon_client.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace summon::tests {

class LocalCluster {
 public:
  struct Options {
    int nodes = 2;
    int local_ranks = 2;
    // The node ranks to start; empty: every node. A node left out never
    // joins, so the others never become READY.
    std::vector<int> started = {};
    // Deadline of every client call (a hang fails the test instead of
    // blocking it).
    absl::Duration call_timeout = absl::Seconds(20);
    absl::Duration collective_timeout = absl::Seconds(10);
    // Set: every node's --checkpoint-root (one directory all of them see,
    // as a cluster's shared filesystem).
    std::string checkpoint_root;
    // Set: every node's --coordinator (etcd://HOST:PORT/CLUSTER: etcd
    // elects the leader) with this --coordinator-lease-ttl. Empty: the
    // static mode (--coordinator static), node 0 leads.
    std::string coordinator;
    absl::Duration coordinator_lease_ttl = absl::Seconds(2);
    // More flags for every daemon (e.g. etcd's TLS and user:
    // EtcdCluster::summond_flags()).
    std::vector<std::string> extra_flags;
    // Set: every daemon's SUMMON_FAULT_POINT (server/runtime/fault_points.h).
    std::string fault_point;
    // Set: every daemon's SUMMON_BROKEN_FENCE (server/runtime/fault_points.h):
    // a fence broken on purpose, to see the history checker catch it.
    std::string broken_fence;
    // Set (one per node): node N's --coordinator instead of `coordinator`,
    // e.g. each node through its own proxy, so one node can be cut off.
    std::vector<std::string> node_coordinators = {};
    // Every daemon's SUMMON_FAULT_FILE is fault_file(node): a fault point
    // armed on one node at run time (server/runtime/fault_points.h).
    bool fault_files = false;
  };

  // Picks free ports, starts the processes and, when every node is started,
  // waits until each reports SERVING. UNAVAILABLE when a daemon exits or a
  // node is not SERVING within 20 s.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(Options options);

  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
  // Stop(), unless it already ran; failures are logged only.
  ~LocalCluster();

  int nodes() const { return options_.nodes; }
  int local_ranks() const { return options_.local_ranks; }
  int world_size() const { return options_.nodes * options_.local_ranks; }
  // The node hosting global rank `rank`.
  int NodeOf(int rank) const { return rank / options_.local_ranks; }
  const std::string& address(int node) const { return addresses_[node]; }
  // A client of node `node`'s daemon (every call with the call timeout);
  // valid until Stop().
  const client::SummonClient& client(int node) const { return *clients_[node]; }

  // Node `node`'s data directory (its instance names its segments).
  const std::string& data_dir(int node) const { return data_dirs_[node]; }
  // Node `node`'s SUMMON_FAULT_FILE (with Options::fault_files).
  std::string fault_file(int node) const;
  // SIGKILL (a machine failure) and reap; its segments and data dir stay.
  absl::Status Kill(int node);
  // Sends `signal` to node `node`'s daemon (SIGSTOP, SIGCONT: a pause);
  // SIGSTOP returns once every thread of it has stopped.
  absl::Status Signal(int node, int signal);
  // Starts a killed node again with the same data directory and a fresh
  // client, and waits until every node serves.
  absl::Status StartNode(int node);

  // The overall health status node `node` reports ("" service).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      int node) const;

  // Deletes every model through node 0 when the cluster serves (so every
  // node unlinks its shards), sends SIGTERM to every daemon, and checks that
  // each exits with status 0 within 10 s and that no shared-memory segment
  // of any node's instance is left. Leftovers are unlinked and the data
  // directories removed either way. Runs once; later calls return OK.
  absl::Status Stop();

 private:
  explicit LocalCluster(Options options) : options_(std::move(options)) {}

  // Starts the daemons of options_.started on `ports`.
  absl::Status Spawn(const std::vector<int>& ports);
  absl::Status SpawnNode(int node);
  // UNAVAILABLE when a started daemon has exited.
  absl::Status CheckAlive();
  absl::Status WaitServing(absl::Time deadline);
  // SIGTERM and wait; the first failure.
  absl::Status Terminate();

  const Options options_;
  std::string work_dir_;
  std::vector<std::string> addresses_;
  std::vector<std::string> data_dirs_;
  std::vector<pid_t> pids_;  // -1 for a node not started, or reaped.
  std::vector<std::unique_ptr<client::SummonClient>> clients_;
  bool stopped_ = false;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_LOCAL_CLUSTER_H_
