#ifndef SUMMON_SERVER_COORDINATOR_ETCD_COORDINATOR_H_
#define SUMMON_SERVER_COORDINATOR_ETCD_COORDINATOR_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/etcd_client.h"

namespace summon::server {

// The coordinator on etcd (docs/architecture.md, "The coordinator"). Under
// /summon/<cluster>/:
//   members/<node>        this node's address, under its lease
//   election/<lease hex>  a candidate, under its lease: etcd's election
//                         recipe, the lowest create-revision leads and each
//                         candidate watches only its predecessor
//   epoch                 the leader's election key, written by each new
//                         leader in a transaction guarded by "my election
//                         key still exists"; its mod-revision is the epoch
//   everything else       Coordinator's keys (rdzv/, models/, commits/)
//
// Leader validity: a keepalive sent at monotonic time s and answered with
// TTL t renewed the lease at etcd after s, so etcd cannot expire it before
// s + t by etcd's clock. The leader acts only while
//   now < last confirmed keepalive send time + t - margin
// (std::chrono::steady_clock), so it stops before etcd could have let
// anybody else lead; the margin absorbs the two clocks' rate difference
// and the time between a check and the action (docs/architecture.md).
class EtcdCoordinator final : public Coordinator {
 public:
  struct Options {
    EtcdClient::Options etcd;
    std::string cluster;  // Keys live under /summon/<cluster>/.
    int node = 0;
    std::string address;  // This node's Peer address (its member record).
    // etcd raises a TTL below 2 s to 2 s and answers with the TTL it gave.
    absl::Duration lease_ttl = absl::Seconds(5);
    // Leadership ends this long before the lease could expire.
    absl::Duration validity_margin = absl::Seconds(1);
    // The longest a campaign waits on one watch before looking again.
    absl::Duration watch_slice = absl::Milliseconds(500);
  };

  explicit EtcdCoordinator(Options options);
  ~EtcdCoordinator() override;  // Stop().

  absl::Status Start() override;
  void Stop() override;
  int node() const override { return options_.node; }
  absl::StatusOr<std::vector<Member>> Members() override;
  absl::StatusOr<Leadership> CurrentLeader() override;
  bool IsLeader() const override;
  bool HeldWithoutQuorum() const override;
  bool HoldsLease() const override {
    absl::MutexLock lock(&mu_);
    return leading_ && !lease_lost_;
  }
  absl::StatusOr<uint64_t> LeaderEpoch() const override;
  absl::StatusOr<uint64_t> NextEpoch() override;
  absl::Status AwaitLeadership(absl::Duration timeout) override;
  absl::Status Put(absl::string_view key, absl::string_view value,
                   const Fence& fence, PutMode mode) override;
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override;
  absl::StatusOr<std::map<std::string, std::string>> List(
      absl::string_view prefix) override;
  absl::Status Delete(absl::string_view key, const Fence& fence) override;
  absl::StatusOr<std::string> AwaitKey(absl::string_view key,
                                       absl::Duration timeout) override;

  // The time left before this node's leadership stops being valid (zero
  // when it does not lead). For tests and metrics.
  absl::Duration LeadershipValidFor() const;
  // This node's lease (0 before the first grant); tests revoke it.
  int64_t lease() const;
  // Tests: stop sending keepalives (a leader that is paused, or whose
  // keepalives are lost) and start again.
  void PauseKeepalivesForTesting(bool paused);

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;

  std::string Key(absl::string_view relative) const;
  // One lease's life: grant, register, campaign, lead until the lease or
  // the election key is lost. Returns why it ended.
  absl::Status Session();
  // Until no candidate was created before `revision` (true); false when
  // `lease` was lost or the coordinator stops first. etcd's faults are
  // waited out meanwhile.
  bool AwaitPredecessors(int64_t lease, int64_t revision);
  // The transaction that starts an epoch of this leader: its revision
  // (greater than `after`), or ABORTED when the election key is gone.
  absl::StatusOr<uint64_t> ClaimEpoch(int64_t lease,
                                      const std::string& election_key,
                                      int64_t revision, uint64_t after);
  // Until the election key is deleted, `lease` is lost or the coordinator
  // stops.
  void HoldLeadership(int64_t lease, const std::string& election_key,
                      int64_t revision);
  void CampaignLoop();
  void KeepAliveLoop();
  // The coordinator runs and `lease` is still this node's, alive.
  bool Running(int64_t lease) const;
  bool ValidLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleeps `duration` unless the coordinator stops first.
  void Pause(absl::Duration duration);
  // The fence's compares on a transaction; UNAVAILABLE when a leader fence
  // is asked for by a node that does not lead.
  absl::Status AddFence(const Fence& fence, etcdserverpb::TxnRequest& txn);
  // Why a fenced transaction did not apply.
  absl::Status FenceFailure(const Fence& fence,
                            const etcdserverpb::TxnResponse& response,
                            absl::string_view key) const;

  const Options options_;
  const std::string prefix_;  // /summon/<cluster>/
  EtcdClient client_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  bool lease_lost_ ABSL_GUARDED_BY(mu_) = false;
  // The last keepalive was answered by etcd with "no leader" (its quorum
  // is lost): the lease cannot expire meanwhile, so it is kept past its
  // TTL until a quorum answers (renewed, or expired).
  bool quorum_lost_ ABSL_GUARDED_BY(mu_) = false;
  // A lease given up while etcd could not be told (no quorum): revoked
  // before the next campaign, or its election key, older than the new one,
  // would make this node wait behind itself until it expires.
  int64_t abandoned_lease_ ABSL_GUARDED_BY(mu_) = 0;
  SteadyTime confirmed_sent_ ABSL_GUARDED_BY(mu_);
  absl::Duration ttl_ ABSL_GUARDED_BY(mu_);
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string election_key_ ABSL_GUARDED_BY(mu_);
  int64_t election_revision_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread campaign_;
  std::thread keepalive_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_ETCD_COORDINATOR_H_
