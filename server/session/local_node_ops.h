#ifndef SUMMON_SERVER_SESSION_LOCAL_NODE_OPS_H_
#define SUMMON_SERVER_SESSION_LOCAL_NODE_OPS_H_

// LocalNodeOps: the NodeOps of a single node, every operation a call into
// that node's own runtime. The session manager's default when it is given
// no NodeOps (a daemon outside a cluster, tests).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/runtime/node_runtime.h"
#include "server/session/node_ops.h"

namespace summon::server {

// A single node: every operation is a call into its own runtime.
class LocalNodeOps : public NodeOps {
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
  // One node: nothing to wait for but its own runtime.
  absl::Status SetGenerations(const GenerationsOp& op,
                              absl::Duration /*wait*/) override {
    return runtime_->SetGenerations(op);
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

#endif  // SUMMON_SERVER_SESSION_LOCAL_NODE_OPS_H_
