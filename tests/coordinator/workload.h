#ifndef SUMMON_TESTS_COORDINATOR_WORKLOAD_H_
#define SUMMON_TESTS_COORDINATOR_WORKLOAD_H_

// The concurrent workload of the fault scenarios (issue 31, "Tests"):
// readers, writers and a trainer against every node of a running summond
// cluster, each operation recorded in a History (tests/coordinator/history.h)
// for the checker.
//  - A reader opens a read-only session of one unit through one node, reads
//    every tensor of it and records the checksums and the unit's generation
//    at the gather; readers take the nodes and units in turn.
//  - Writer w owns unit w: it opens a writable session of it, writes the
//    seeded values of a seed no other write uses into every tensor, and
//    closes with writeback: OK is acknowledged, ABORTED (R7: an optimizer
//    step moved the generation) or a failure before the close is a failure
//    (the session is aborted), any other close error is unknown. An abort
//    refused with UNAVAILABLE (etcd without quorum) is sent again before
//    the writer's next open: the open session would hold the unit until
//    its lease ends.
//  - The trainer walks every rank through FORWARD, BACKWARD, OPTIMIZER and
//    IDLE, each report sent to the node holding the rank.
// Every call goes through a fresh client of the node (a killed node's old
// channel would wait out its reconnect backoff), with a short deadline, and
// every operation records the epoch the node reported just before it.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "summon/v1/summon.pb.h"
#include "tests/coordinator/history.h"

namespace summon::tests {

class Workload {
 public:
  struct Options {
    std::vector<std::string> addresses;  // Node N's address.
    int local_ranks = 1;
    std::string model;
    v1::Model description;  // As CreateModel answered.
    int readers = 3;
    // Deadline of each call: short, so a call into a lost leader ends (as
    // unknown) instead of holding its worker past the fault.
    absl::Duration call_timeout = absl::Seconds(6);
    // Pause of the trainer between two phase reports.
    absl::Duration trainer_pace = absl::Milliseconds(50);
  };

  // The units of the cluster tests' kUnevenLayout and their tensors.
  static const std::map<std::string, std::string>& UnitOf();

  explicit Workload(Options options);
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  ~Workload();  // Stop().

  void Start();
  void Stop();  // Waits for every worker's current operation.
  const History& history() const { return history_; }
  // Operations recorded so far, those that succeeded, the successful reads
  // and the acknowledged writebacks.
  int recorded() const { return recorded_.load(); }
  int succeeded() const { return succeeded_.load(); }
  int reads_served() const { return reads_served_.load(); }
  int writes_acked() const { return writes_acked_.load(); }

 private:
  void Reader(int reader);
  void Writer(int writer);
  void Trainer();
  void Record(Op op);
  std::vector<std::string> TensorsOf(const std::string& unit) const;
  std::string Values(const std::string& fqn, uint64_t seed) const;

  const Options options_;
  std::vector<std::string> units_;
  History history_;
  std::atomic<bool> stop_{false};
  std::atomic<int> recorded_{0};
  std::atomic<int> succeeded_{0};
  std::atomic<int> reads_served_{0};
  std::atomic<int> writes_acked_{0};
  std::vector<std::thread> threads_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_WORKLOAD_H_
