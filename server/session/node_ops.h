#ifndef SUMMON_SERVER_SESSION_NODE_OPS_H_
#define SUMMON_SERVER_SESSION_NODE_OPS_H_

// The NodeOps interface: what the session manager (on the leader) asks of
// the cluster's nodes, in the records of runtime/node_op_types.h. Its
// implementations: LocalNodeOps (local_node_ops.h, one node) and
// ClusterNodeOps (service/cluster_node_ops.h, over the Peer service).

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/tensor_stats.h"
#include "server/runtime/node_op_types.h"

namespace summon::server {

// What the session manager (on the leader) asks of the cluster's nodes. It
// decides what moves (rules, scope, placement, sequence numbers); the nodes'
// runtimes move it. LocalNodeOps: one node. A cluster implementation fans
// each operation out to every node's runtime over the Peer service.
class NodeOps {
 public:
  virtual ~NodeOps() = default;

  // Every node, in op.sequence order.
  virtual absl::Status Gather(const GatherOp& op) = 0;
  // Every node holding a copy, before returning (read-your-writes anywhere).
  virtual absl::Status Write(const WriteOp& op) = 0;
  // From a node holding a copy (the nearest one).
  virtual absl::Status Read(const std::string& gather_id,
                            const std::string& session_id, int tensor,
                            bool grad, core::DType dtype, int64_t offset,
                            int64_t count, int64_t chunk_bytes,
                            const ChunkSink& sink) = 0;
  virtual absl::StatusOr<std::vector<core::TensorStatistics>> Stats(
      const std::string& gather_id, const std::string& session_id,
      const std::vector<int>& tensors, bool grad, int bins) = 0;
  // This (the asking) node's copy, for a client on its host: never another
  // node's, which neither a descriptor nor a CUDA IPC handle can reach.
  virtual absl::StatusOr<LocalCopyShare> ShareLocalCopy(
      const std::string& gather_id, bool grad) = 0;
  // Every node; OK only when every node staged (R8), else nothing commits.
  virtual absl::StatusOr<int64_t> Prepare(const PrepareOp& op) = 0;
  virtual absl::Status Commit(const CommitOp& op) = 0;
  virtual void Abort(const std::string& session_id) = 0;
  // Every node, in op.sequence order: generations the leader moved (an
  // optimizer step's, R7, R23). Returns once every node has them, or after
  // `wait` with DEADLINE_EXCEEDED: a node that has not answered by then
  // still gets them in the background, and its later operations wait for
  // this one's sequence number, so a silent node holds the caller at most
  // `wait` (R24) and no rule ever reads a node's generations out of order.
  virtual absl::Status SetGenerations(const GenerationsOp& op,
                                      absl::Duration wait) = 0;
  // The cluster epoch operations run in (0 on a single node); a session
  // whose gather ran in another epoch cannot be written back.
  virtual uint64_t Epoch() const { return 0; }
  // The nodes outside the epoch (a cluster formed on its survivors): plans
  // leave them out (core::NodeSets::absent). Empty on a single node.
  virtual std::set<int> AbsentNodes() const { return {}; }
  // Members that came back in this epoch and catch up before serving
  // (Membership::ReturningNodes). Empty on a single node.
  virtual std::set<int> ReturningNodes() const { return {}; }
  // Must not block on other nodes: they are called under the manager's lock.
  virtual void Release(const std::string& gather_id) = 0;
  virtual void ReleaseSession(const std::string& session_id) = 0;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_NODE_OPS_H_
