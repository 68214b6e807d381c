#ifndef SUMMON_TESTS_FAULTS_FAULT_CLUSTER_H_
#define SUMMON_TESTS_FAULTS_FAULT_CLUSTER_H_

// A cluster of real summond processes on loopback whose nodes the fault
// harness kills (SIGKILL), freezes (SIGSTOP / SIGCONT), restarts with the
// same data directory, or restarts armed with a fault point
// (SUMMON_FAULT_POINT, server/fault_points.h).
//
// It is tests/cluster's LocalCluster with per-node process control, which
// LocalCluster does not expose (its daemons share one environment, fixed
// --heartbeat-ms=500, and cannot be restarted). Each daemon logs to
// <log_prefix>node<N>.log in the test's undeclared outputs.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/lib/summon_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/faults/child_process.h"

namespace summon::tests {

class FaultCluster {
 public:
  struct Options {
    int nodes = 3;
    int local_ranks = 2;
    absl::Duration heartbeat = absl::Milliseconds(200);
    absl::Duration collective_timeout = absl::Seconds(3);
    // Deadline of every client call: long enough that a daemon's own bound
    // shows, short enough that a hang fails the test instead of blocking it.
    absl::Duration call_timeout = absl::Seconds(20);
    // SUMMON_FAULT_POINT of nodes started armed, by node.
    std::map<int, std::string> fault_points;
    // Node N logs to <log_prefix>node<N>.log.
    std::string log_prefix;
  };

  // Picks free ports, starts every node and waits until each is SERVING.
  static absl::StatusOr<std::unique_ptr<FaultCluster>> Start(Options options);

  FaultCluster(const FaultCluster&) = delete;
  FaultCluster& operator=(const FaultCluster&) = delete;
  ~FaultCluster();  // Stop(); failures are logged only.

  int nodes() const { return options_.nodes; }
  int world_size() const { return options_.nodes * options_.local_ranks; }
  const Options& options() const { return options_; }
  // How long the leader waits for a silent follower (server/server.cc):
  // max(3 heartbeats, 1 s).
  absl::Duration failure_timeout() const;
  const std::string& address(int node) const { return addresses_[node]; }
  // A client of node `node` on a channel made for its current process (a
  // restart makes a new one, so no reconnect backoff is inherited).
  const client::SummonClient& client(int node) const { return *clients_[node]; }

  // The daemon of `node` has been started and has not ended.
  bool running(int node) const { return processes_[node].running(); }
  // Starts `node` again with its data directory; `fault_point` non-empty:
  // armed with SUMMON_FAULT_POINT.
  absl::Status StartNode(int node, absl::string_view fault_point = "");
  // SIGKILL (a machine failure); the process is reaped.
  absl::Status Kill(int node);
  absl::Status Pause(int node);   // SIGSTOP
  absl::Status Resume(int node);  // SIGCONT
  // Waits until `node`'s daemon ends by itself (a fault point fired).
  absl::StatusOr<ExitStatus> WaitExit(int node, absl::Duration timeout);
  // UNAVAILABLE naming every started daemon that has ended.
  absl::Status CheckAlive();

  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      int node) const;
  // Every node SERVING within `timeout`; UNAVAILABLE when a daemon ended.
  absl::Status WaitServing(absl::Duration timeout);

  // Deletes every model through node 0 when the cluster serves, SIGTERMs
  // every daemon (SIGCONT first), checks each exits with status 0 within
  // 10 s and that no node left shared memory behind. Runs once.
  absl::Status Stop();

 private:
  explicit FaultCluster(Options options) : options_(std::move(options)) {}
  absl::Status Prepare(const std::vector<int>& ports);
  std::string LogPath(int node) const;

  const Options options_;
  std::string work_dir_;
  std::string log_dir_;
  std::vector<std::string> addresses_;
  std::vector<std::string> data_dirs_;
  std::vector<ChildProcess> processes_;
  std::vector<std::unique_ptr<client::SummonClient>> clients_;
  bool stopped_ = false;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_FAULTS_FAULT_CLUSTER_H_
