#ifndef SUMMON_SERVER_COORDINATOR_COORDINATOR_H_
#define SUMMON_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace summon::server {

// Who decides what in a cluster (docs/architecture.md, "The coordinator"):
// which nodes are members, which one leads, the cluster epoch, and the
// small records every node must agree on (rendezvous keys of each epoch,
// the model registry, each writeback's commit decision).
//
// Two implementations: StaticCoordinator (a single node, or today's fixed
// list where node 0 always leads under one constant epoch) and
// EtcdCoordinator (etcd's v3 API: members under a lease, etcd's election
// recipe, the epoch written by each new leader).
//
// Keys are relative to the cluster ("models/m1"); each implementation puts
// its own prefix in front. Values are raw bytes.
class Coordinator {
 public:
  struct Member {
    int node = 0;
    std::string address;  // HOST:PORT of the node's Peer service.
    bool operator==(const Member& other) const {
      return node == other.node && address == other.address;
    }
  };

  // Who leads the cluster now, as the coordinator records it.
  struct Leadership {
    int node = 0;
    uint64_t epoch = 0;
  };

  // What a write requires to still hold when it is applied. A write whose
  // epoch is no longer the cluster's is refused (ABORTED, naming both
  // epochs), so nothing a deposed epoch sends lands; `leader` also requires
  // that this node still holds the leadership it had when the epoch began.
  struct Fence {
    uint64_t epoch = 0;  // 0: unfenced.
    bool leader = false;
  };

  enum class PutMode {
    kOverwrite,
    // ALREADY_EXISTS when the key holds another value (one decision per
    // key; the same bytes again are accepted, as a retry must be).
    kCreate,
  };

  virtual ~Coordinator() = default;

  // Registers this node as a member and begins to campaign for leadership
  // in the background.
  virtual absl::Status Start() = 0;
  // Gives up leadership and membership (best effort) and stops.
  virtual void Stop() = 0;

  virtual int node() const = 0;
  // The members alive now, by node.
  virtual absl::StatusOr<std::vector<Member>> Members() = 0;
  // Who leads and under which epoch, read from the coordinator (not this
  // node's belief). UNAVAILABLE "electing a leader" when nobody leads.
  virtual absl::StatusOr<Leadership> CurrentLeader() = 0;

  // True only while this node leads and its leadership is provably still
  // valid (etcd: before its lease could have expired, see EtcdCoordinator).
  // A leader checks it before every action.
  virtual bool IsLeader() const = 0;
  // This node led until the coordinator lost its quorum and still holds
  // its lease as far as anybody can tell: it may not act (IsLeader is
  // false), but no other node can be elected either until a quorum is back
  // (etcd expires no lease and writes no epoch without one), so its open
  // sessions may keep being read. Its lease is renewed (IsLeader again) or
  // found expired once a quorum answers. The static coordinator has no
  // quorum to lose.
  virtual bool HeldWithoutQuorum() const { return false; }
  // This node was elected and has not found its lease lost (expired,
  // revoked, or unconfirmed past TTL + margin while etcd was reachable),
  // whether or not it may act now: a leader whose validity lapsed keeps its
  // formation until this turns false, so a lost quorum (which is found only
  // after a keepalive's deadline) does not end it.
  virtual bool HoldsLease() const { return IsLeader(); }
  // The epoch this node leads under; UNAVAILABLE when it does not lead.
  virtual absl::StatusOr<uint64_t> LeaderEpoch() const = 0;
  // The leader begins a new epoch under the same leadership (the cluster
  // re-forms: a node was lost or came back), so that nothing sent under
  // the previous formation is accepted by the new one: the new epoch,
  // greater than every earlier one. UNAVAILABLE when this node does not
  // lead; ABORTED when its leadership ended meanwhile.
  virtual absl::StatusOr<uint64_t> NextEpoch() = 0;
  // Until this node leads (OK) or `timeout` passes (DEADLINE_EXCEEDED).
  virtual absl::Status AwaitLeadership(absl::Duration timeout) = 0;

  virtual absl::Status Put(absl::string_view key, absl::string_view value,
                           const Fence& fence,
                           PutMode mode = PutMode::kOverwrite) = 0;
  // Nullopt when absent. Always a linearizable read.
  virtual absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) = 0;
  // Every key starting with `prefix`, with its value, keys relative to the
  // cluster.
  virtual absl::StatusOr<std::map<std::string, std::string>> List(
      absl::string_view prefix) = 0;
  virtual absl::Status Delete(absl::string_view key, const Fence& fence) = 0;
  // The value of `key` once it is set; DEADLINE_EXCEEDED after `timeout`.
  virtual absl::StatusOr<std::string> AwaitKey(absl::string_view key,
                                               absl::Duration timeout) = 0;
};

// Where each kind of cluster record lives, relative to the cluster.
namespace coordinator_keys {
// Gloo/NCCL rendezvous keys of one epoch: rdzv/<epoch>/<key>.
std::string Rendezvous(uint64_t epoch, absl::string_view key);
// The model registry's record of a model: models/<name>.
std::string Model(absl::string_view name);
inline constexpr char kModelsPrefix[] = "models/";
// A writeback's commit record: commits/<record>, where the session manager
// names each attempt's record "<session>/<attempt>" (one record per
// attempt, holding its decision or its abort seal; see
// server/session/session_decisions.cc).
std::string Commit(absl::string_view record);
inline constexpr char kCommitsPrefix[] = "commits/";
}  // namespace coordinator_keys

// A writeback's commit decision, recorded by the leader before COMMIT is
// sent to any node: the one transaction that makes a writeback durable.
// ALREADY_EXISTS when the record already holds something else (a decision
// is never changed, and an attempt sealed aborted takes no decision);
// ABORTED when the leader's epoch was deposed. The same put writes an
// attempt's abort seal under the decision's own key and fence.
absl::Status RecordCommitDecision(Coordinator& coordinator,
                                  absl::string_view record,
                                  absl::string_view decision, uint64_t epoch);
// Nullopt when the record is absent (a new leader aborts its writeback).
absl::StatusOr<std::optional<std::string>> CommitDecision(
    Coordinator& coordinator, absl::string_view record);

}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_COORDINATOR_H_
