#ifndef SUMMON_TESTS_COORDINATOR_HISTORY_H_
#define SUMMON_TESTS_COORDINATOR_HISTORY_H_

// The history of a concurrent workload against a summond cluster under
// faults (tests/coordinator/fault_scenarios_test), and the checker over it
// (issue 31, "Tests"). Every operation is recorded with its start and end,
// the node it went to, its outcome, the cluster epoch the node reported and
// the checksums it read or wrote. Versions: every write puts the seeded
// values of one unique seed into every tensor of one unit, so a checksum
// names the write (or the initial values) it came from, and the writes of
// one unit come from one writer, one after another, so they are ordered.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace summon::tests {

// FNV-1a over the bytes: the checksum of a tensor's bytes.
uint64_t BytesChecksum(absl::string_view bytes);

enum class OpKind { kRead, kWrite, kPhase };
// kUnknown: the call failed in a way that leaves open whether it took
// effect (a writeback whose close timed out or whose leader was lost).
enum class Outcome { kOk, kFailed, kUnknown };

struct Op {
  int id = 0;  // Set by History::Record: the order of recording.
  OpKind kind = OpKind::kRead;
  int worker = 0;  // The reader, writer or trainer thread.
  int node = 0;    // The node the calls went to.
  absl::Time start;
  absl::Time end;
  Outcome outcome = Outcome::kOk;
  std::string error;   // The status, when not kOk.
  uint64_t epoch = 0;  // Reported by `node` just before; 0: not known.
  std::string unit;    // Read, write: the unit read or written.
  uint64_t seed = 0;   // Write: the seed of the values written.
  // Read: what was read; write: what was written (FQN -> checksum).
  std::map<std::string, uint64_t> checksums;
  // Read: the unit's generation at the session's gather.
  uint64_t generation = 0;
};

// Thread-safe recorder.
class History {
 public:
  void Record(Op op);
  std::vector<Op> ops() const;

 private:
  mutable std::mutex mu_;
  std::vector<Op> ops_;
};

struct CheckInput {
  std::vector<Op> ops;
  // FQN -> its unit, for every tensor the workload reads or writes.
  std::map<std::string, std::string> unit_of;
  // FQN -> checksum of its initial (seeded) values.
  std::map<std::string, uint64_t> initial;
  // After the cluster is healthy again: every tensor read through each node
  // (node -> FQN -> checksum).
  std::map<int, std::map<std::string, uint64_t>> final_reads;
};

struct CheckResult {
  // Empty: the history is correct. At most 5 per rule are listed;
  // `violation_count` counts them all.
  std::vector<std::string> violations;
  int violation_count = 0;
  int ops = 0, acked = 0, failed = 0, unknown = 0;
  int reads = 0, writes = 0, phases = 0;
  // The longest time no operation succeeded while some was tried.
  absl::Duration max_unavailable;
  std::string Summary() const;
};

// The rules (each violation says which and names the operations):
//  - lost ack: each unit ends (on every node) at its last acknowledged
//    write, or at a write of unknown outcome started after it;
//  - half applied: every tensor of a unit shows one version, in each read
//    and on each node at the end, and every node ends with the same one;
//  - phantom read: every checksum read is the initial value or a value some
//    write attempted; a write that definitely failed is never seen;
//  - generation regression: each reader sees a unit's generation never go
//    backwards;
//  - stale version: a read that starts after another ended never sees an
//    older version of the unit (the end state counts as a last read);
//  - deposed epoch: a write from epoch E whose call had ended, not seen by
//    a read served later in an epoch above E, is never seen afterwards (it
//    was applied by a deposed leader).
CheckResult CheckHistory(const CheckInput& input);

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_HISTORY_H_
