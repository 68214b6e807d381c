#ifndef SUMMON_SERVER_SESSION_NODE_OPS_H_
#define SUMMON_SERVER_SESSION_NODE_OPS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/runtime/node_runtime.h"

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
  // The cluster epoch operations run in (0 on a single node); a session
  // whose gather ran in another epoch cannot be written back.
  virtual uint64_t Epoch() const { return 0; }
  // Must not block on other nodes: they are called under the manager's lock.
  virtual void Release(const std::string& gather_id) = 0;
  virtual void ReleaseSession(const std::string& session_id) = 0;
};

// A single node: every operation is a call into its own runtime.
class LocalNodeOps final : public NodeOps {
 public:
  explicit LocalNodeOps(NodeRuntime* runtime) : runtime_(runtime) {}

  absl::Status Gather(const GatherOp& op) override {
    return runtime_->Gather(op);
  }
  absl::Status Write(const WriteOp& op) override { return runtime_->Write(op); }
  absl::Status Read(const std::string& gather_id, const std::string& session_id,
                    int tensor, bool grad, core::DType dtype, int64_t offset,
                    int64_t count, int64_t chunk_bytes,
                    const ChunkSink& sink) override {
    return runtime_->Read(gather_id, session_id, tensor, grad, dtype, offset,
                          count, chunk_bytes, sink);
  }
  absl::StatusOr<std::vector<core::TensorStatistics>> Stats(
      const std::string& gather_id, const std::string& session_id,
      const std::vector<int>& tensors, bool grad, int bins) override {
    return runtime_->Stats(gather_id, session_id, tensors, grad, bins);
  }
  absl::StatusOr<LocalCopyShare> ShareLocalCopy(const std::string& gather_id,
                                                bool grad) override {
    return runtime_->ShareCopy(gather_id, grad);
  }
  absl::StatusOr<int64_t> Prepare(const PrepareOp& op) override {
    return runtime_->Prepare(op);
  }
  absl::Status Commit(const CommitOp& op) override {
    return runtime_->Commit(op);
  }
  void Abort(const std::string& session_id) override {
    runtime_->Abort(session_id);
  }
  void Release(const std::string& gather_id) override {
    runtime_->Release(gather_id);
  }
  void ReleaseSession(const std::string& session_id) override {
    runtime_->ReleaseSession(session_id);
  }

 private:
  NodeRuntime* const runtime_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_NODE_OPS_H_
