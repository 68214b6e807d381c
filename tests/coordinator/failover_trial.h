#ifndef SUMMON_TESTS_COORDINATOR_FAILOVER_TRIAL_H_
#define SUMMON_TESTS_COORDINATOR_FAILOVER_TRIAL_H_

// One failover of a summond cluster on etcd, as the failover test checks it
// and bench/etcd_failover_bench times it: the leader's summond is killed
// (SIGKILL) and either started again at once, as a supervisor (Kubernetes,
// systemd) would, or left down (a lost machine); the time runs until a
// surviving node answers an open and a read of the model with the expected
// bytes.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "summon/v1/summon.pb.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {

// Who leads as every node of `cluster` reports it (GetClusterStatus):
// INTERNAL when two READY nodes name different leaders or epochs (two
// leaders acting), UNAVAILABLE while any node is not READY.
absl::StatusOr<v1::ClusterStatus> AgreedLeadership(const LocalCluster& cluster);

// AgreedLeadership asked every 100 ms until every node is READY under one
// leadership, for at most `timeout` (a cluster forms a while after a node
// starts or a leader is elected); INTERNAL at once on two leaderships.
absl::StatusOr<v1::ClusterStatus> AwaitAgreedLeadership(
    const LocalCluster& cluster, absl::Duration timeout);

// The cluster the etcd tests run: 3 nodes x 1 rank on the etcd member whose
// client address is `etcd_address`, under `name`, with a 2 s lease (etcd's
// least) so that a lost leader is replaced within seconds, and a 10 s
// collective timeout.
LocalCluster::Options ThreeNodesOnEtcd(absl::string_view etcd_address,
                                       absl::string_view name);

struct FailoverResult {
  v1::ClusterStatus before;  // The leadership the kill ended.
  v1::ClusterStatus after;   // The one that served the read.
  // From the kill to the first open + read with the expected bytes through
  // a node that survived.
  absl::Duration serving_again;
};

// What happens to the killed leader's summond.
enum class AfterKill {
  // Started again at once; the clock runs through its start (a supervisor).
  kRestart,
  // Left down while the survivors elect a leader and serve without it (a
  // model every survivor can serve alone: replicated); started again once
  // they served, off the clock, and waited for until every node agrees.
  kLeaveDown,
};

// Kills the leader, starts it again or not (`after`), then opens a read-only
// session of `model` through a survivor and reads `fqn` until it answers
// `expected`, within `timeout`. `after` on the result is the leadership the
// survivor reports once it served.
absl::StatusOr<FailoverResult> KillLeaderUntilServed(
    LocalCluster& cluster, const std::string& model, const std::string& fqn,
    const std::string& expected, absl::Duration timeout,
    AfterKill after = AfterKill::kRestart);

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_FAILOVER_TRIAL_H_
