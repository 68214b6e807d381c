#ifndef SUMMON_SERVER_SERVICE_CLUSTER_NODE_OPS_H_
#define SUMMON_SERVER_SERVICE_CLUSTER_NODE_OPS_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/membership.h"
#include "server/runtime/node_runtime.h"
#include "server/session/node_ops.h"

namespace summon::server {

// The leader's NodeOps for a cluster: every operation goes to each node's
// runtime (its own in process, the others over the Peer service), in
// parallel; collectives carry the leader's sequence numbers so every node
// runs them in the same order. Reads go to the nearest node holding a copy.
class ClusterNodeOps final : public NodeOps {
 public:
  // `failure_wait`: how long a failed operation waits for the membership
  // to name a failed node (its failure timeout).
  ClusterNodeOps(Membership* membership, NodeRuntime* local,
                 absl::Duration collective_timeout,
                 absl::Duration failure_wait);
  // Finishes queued releases; cancels the calls still in flight and waits
  // for the generations still being set in the background.
  ~ClusterNodeOps() override;

  absl::Status Gather(const GatherOp& op) override;
  absl::Status Write(const WriteOp& op) override;
  absl::Status Read(const std::string& gather_id, const std::string& session_id,
                    int tensor, bool grad, core::DType dtype, int64_t offset,
                    int64_t count, int64_t chunk_bytes,
                    const ChunkSink& sink) override;
  absl::StatusOr<std::vector<core::TensorStatistics>> Stats(
      const std::string& gather_id, const std::string& session_id,
      const std::vector<int>& tensors, bool grad, int bins) override;
  absl::StatusOr<LocalCopyShare> ShareLocalCopy(const std::string& gather_id,
                                                bool grad) override {
    return local_->ShareCopy(gather_id, grad);
  }
  absl::StatusOr<int64_t> Prepare(const PrepareOp& op) override;
  absl::Status Commit(const CommitOp& op) override;
  void Abort(const std::string& session_id) override;
  absl::Status SetGenerations(const GenerationsOp& op,
                              absl::Duration wait) override;
  uint64_t Epoch() const override { return membership_->epoch(); }
  std::set<int> AbsentNodes() const override {
    return membership_->AbsentNodes();
  }
  std::set<int> ReturningNodes() const override {
    return membership_->ReturningNodes();
  }
  // Cancels every call in flight to any node: after a failure nothing waits
  // for the lost node until its own deadline.
  void CancelInFlight();
  void Release(const std::string& gather_id) override;
  void ReleaseSession(const std::string& session_id) override;

 private:
  // Runs `op(node)` for every node at once; results by node. `epoch`: the
  // cluster epoch the operation belongs to (its sequence number's, sent in
  // its request); none runs once the cluster is in another. `sequence`:
  // the operation's number in the leader's order (0: none), taken unrun on
  // this node when it may not act. `decided`: the COMMIT of a decision
  // already recorded with the coordinator, which this node applies too
  // while its leadership lapsed within the same epoch (see Commit).
  std::vector<absl::Status> OnEveryNode(
      uint64_t epoch, const std::function<absl::Status(int node)>& op,
      uint64_t sequence = 0, bool decided = false);
  // The first failure, naming its node; OK when none failed.
  absl::Status FirstFailure(const std::vector<absl::Status>& results) const;
  std::unique_ptr<v1::Peer::Stub> Stub(int node);
  // Sets the deadline and tracks the call until `context` is destroyed.
  class Call;
  void Deadline(grpc::ClientContext& context) const;
  // Releases are fire-and-forget (they run under the manager's lock).
  void ReleaseOnPeers(v1::NodeReleaseRequest request);
  void Enqueue(std::function<void()> task);
  void Worker();
  // Generations being set in the background (SetGenerations past its wait).
  struct Outcome;
  struct Background {
    std::thread thread;
    std::shared_ptr<Outcome> outcome;
  };
  // Joins the background threads that finished (mu_ held).
  void JoinFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Membership* const membership_;
  NodeRuntime* const local_;
  const absl::Duration rpc_timeout_;
  const absl::Duration failure_wait_;

  mutable absl::Mutex calls_mu_;
  mutable std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(calls_mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
  std::vector<Background> background_ ABSL_GUARDED_BY(mu_);
  // SetGenerations calls some node has not answered yet: while there is
  // one, a node is silent, and later calls do not wait for it again (the
  // caller is held once per outage, not once per step).
  int generations_unanswered_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by the destructor: a failed call no longer waits for the
  // membership to name a failed node.
  std::atomic<bool> shutting_down_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_CLUSTER_NODE_OPS_H_
