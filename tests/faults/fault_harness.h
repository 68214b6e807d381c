#ifndef SUMMON_TESTS_FAULTS_FAULT_HARNESS_H_
#define SUMMON_TESTS_FAULTS_FAULT_HARNESS_H_

// The fault harness's fixture: a fresh 3-node x 2-rank cluster per scenario
// (so that one defect cannot leak into the next scenario), a seeded model
// whose full tensors (params and grads) the harness always knows, and the
// checks every scenario shares: shards of every rank and unit against the
// known values, failures naming the failed node within the bound, and a row
// of the report.

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "summon/v1/summon.pb.h"
#include "tests/cluster/cluster_values.h"
#include "tests/faults/fault_cluster.h"
#include "tests/faults/fault_report.h"

namespace summon::tests {

inline constexpr int kLeader = 0;
// The follower the follower scenarios break (the other one survives).
inline constexpr int kVictim = 2;
inline constexpr int kSurvivor = 1;
inline constexpr char kModel[] = "faults";

// The full tensors of a model: what every rank's shards must hold.
struct ModelValues {
  TensorBytes params;
  TensorBytes grads;
};

// A failing call and when it failed, counted from the fault.
struct Detection {
  absl::Status status;
  absl::Duration after;
};

class FaultHarnessTest : public testing::Test {
 protected:
  // Stops the scenario's cluster: every daemon exits cleanly on SIGTERM and
  // leaves no shared memory behind.
  void TearDown() override;

  // Starts a cluster (stopping the previous one), nodes in `fault_points`
  // armed with SUMMON_FAULT_POINT, heartbeating every `heartbeat`, and
  // creates the seeded model. Use with ASSERT_NO_FATAL_FAILURE.
  void StartCluster(std::map<int, std::string> fault_points = {},
                    absl::Duration heartbeat = absl::Milliseconds(200));

  FaultCluster& cluster() { return *cluster_; }
  const client::SummonClient& node(int n) { return cluster_->client(n); }
  const ModelValues& known() const { return known_; }

  // A failure is noticed within the failure timeout, and a call already
  // waiting on a collective within the collective timeout; 1 s of slack.
  absl::Duration DetectBound();

  // Expects `node` to kill itself (SIGKILL) at its fault point.
  void ExpectDiedAtFaultPoint(int node);
  // Starts `node` again (same data directory, no fault point); the time
  // until every node serves and the leader reaches each (WaitUsable).
  absl::Duration Restart(int node);
  // Once every node serves: until the leader's calls reach every node
  // (ModelChecksum asks each), bounded; the time it took.
  absl::Duration WaitUsable();

  // A writable session over the whole model, gradients included.
  v1::Session OpenWritable(int via);
  // Writes new values (seeded with `seed`) into some parameters and
  // gradients of `session` through `via`; the model's full tensors once
  // that is written back.
  ModelValues Edit(int via, const std::string& session, uint64_t seed);

  // Checks every rank's shard of every unit, params and grads, against
  // `expected` (ModelChecksum through the leader). On a mismatch the
  // failure lists the (rank, unit) holding `expected`, those holding
  // `before` (the values before a writeback) and those holding neither.
  bool ShardsHold(const ModelValues& expected, const ModelValues& before,
                  const std::string& what);
  // The shards still hold the known values.
  bool ShardsIntact(const std::string& what) {
    return ShardsHold(known_, known_, what);
  }

  // `status` is UNAVAILABLE or ABORTED and names `node` ("node N" or its
  // address).
  void ExpectNamesNode(const absl::Status& status, int node,
                       const std::string& what);
  // Calls `call` until it fails (or `timeout` passes: a failure of the
  // test); the failure and its time since `since`.
  static Detection PollUntilFailure(const std::function<absl::Status()>& call,
                                    absl::Time since, absl::Duration timeout);

  // "CODE: message" cut to a table cell.
  static std::string Brief(const absl::Status& status);
  static void Report(FaultRow row) { FaultReport::Get().Add(std::move(row)); }

 private:
  void StopCluster();

  std::unique_ptr<FaultCluster> cluster_;
  v1::Model model_;
  ModelValues known_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_FAULTS_FAULT_HARNESS_H_
