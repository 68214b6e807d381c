#ifndef SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_
#define SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/tensor_stats.h"
#include "server/comm/communicator.h"
#include "server/model/model_registry.h"
#include "server/runtime/buffer_pool.h"

namespace summon::server {

// Everything a node needs to compute a gather's plan exactly as every other
// node does: the plan is a pure function of the model and these fields.
struct GatherOp {
  uint64_t sequence = 0;  // The leader's global order of collectives.
  std::string gather_id;
  std::string model;
  core::ScopeRequest scope;
  bool rank0_only = false;  // One copy on the home rank's node, else one per
  int home_rank = 0;        // node.
  bool grads = false;       // The session has a gradients buffer.
  // No session writes into the copy (read-only sessions write into their
  // own private copies): reads then hand its bytes on pinned and without
  // holding the copy's lock. Not sent to peers, which keep the default.
  bool read_only = false;
  // The session asked for its copies in host memory. Otherwise a model whose
  // shards are in device memory gets its copies there too (DESIGN.md
  // section 2's placement); host-placed models always use host memory.
  bool offload_to_cpu = false;
};

// A write into the copies of a gather. `private_copy`: the session does not
// own the gather (read-only, possibly shared), so the write lands in that
// session's own copy of the tensor.
struct WriteOp {
  std::string gather_id;
  std::string session_id;
  bool private_copy = false;
  int tensor = 0;
  bool grad = false;
  int64_t element_offset = 0;
  int64_t element_size = 1;  // Of the tensor's dtype, to split large writes.
  std::string bytes;
};

// PREPARE of a two-phase writeback: every node stages its ranks' owned
// slices (from its own copy, or scattered from the home) and checks that
// the units did not move since the gather (R7, unless `force`).
struct PrepareOp {
  uint64_t sequence = 0;
  std::string gather_id;
  std::string session_id;
  std::map<int, uint64_t> expected_generations;  // Unit -> at gather.
  std::map<int, uint64_t> target_generations;    // Unit -> after commit.
  bool force = false;
};

// COMMIT: staged data goes into the shards and every scoped unit takes its
// target generation, on every node alike.
struct CommitOp {
  // 0: out of order, for commits decided before a failure and finished
  // while the cluster re-forms.
  uint64_t sequence = 0;
  std::string model;
  std::string gather_id;
  std::string session_id;
  std::map<int, uint64_t> target_generations;
};

// A copy held on this node, handed to a client on its host (MapSession):
// a host copy as a read-only descriptor, a device copy as the CUDA IPC
// handle of each GPU's copy.
struct LocalCopyShare {
  int fd = -1;  // Host copy: owned by the receiver; -1 for a device copy.
  struct DeviceCopy {
    int device = -1;         // CUDA ordinal.
    std::vector<int> ranks;  // This node's ranks on that GPU.
    std::string ipc_handle;  // cudaIpcMemHandle_t bytes.
  };
  std::vector<DeviceCopy> device_copies;  // By device; empty for a host copy.
};

// Receives a read in chunks; returning false stops the read (client gone).
// `bytes` are valid during the call. A non-null `pin` says they are the
// shared copy of a read-only gather (GatherOp::read_only), unconverted,
// which nothing changes, and keeps that memory mapped (not reused by
// another gather) while any copy of the pin is held: the sink may hand the
// bytes on without copying them. Pinned chunks are handed over without the
// copy's lock held, so a slow reader never holds up another.
using ChunkSink =
    std::function<bool(int64_t element_offset, absl::string_view bytes,
                       const std::shared_ptr<const void>& pin)>;

// One node's data plane: the session copies placed on this node and the
// movement of shard bytes into and out of them, by the core's plans. Every
// node of a cluster runs the same operations; collectives (gathers and the
// scatter of a rank0_only writeback) run strictly in the leader's sequence
// order, so concurrent sessions can never deadlock or interleave wrongly. A
// single node is the same code over a one-rank communicator.
class NodeRuntime {
 public:
  NodeRuntime(int node, ModelRegistry* registry, Communicator* communicator,
              absl::Duration collective_timeout);
  ~NodeRuntime();

  int node() const { return node_; }
  // A cluster's communicator exists only once every node has joined.
  void SetCommunicator(Communicator* communicator);
  // Gathers of session copies in device memory exchange on the device
  // communicator (NCCL) instead of Gloo through host buffers. Enabled once,
  // at start, on every node of the cluster alike (the choice must agree
  // across nodes); the communicator itself comes with each READY.
  void EnableDeviceExchange() { device_exchange_enabled_ = true; }
  void SetDeviceCommunicator(Communicator* communicator);

  // This node's part of a gather: its ranks' slices go to the nodes holding
  // copies (allgatherv for one copy per node, gather to the home for
  // rank0_only), and the copy placed here, if any, is filled.
  absl::Status Gather(const GatherOp& op);
  bool HasCopy(const std::string& gather_id) const;
  int64_t CopyBytes() const;  // Of all copies held here.

  absl::Status Write(const WriteOp& op);
  // Elements [offset, offset + count) of a tensor of a local copy, converted
  // to `dtype`, in chunks of about `chunk_bytes`.
  absl::Status Read(const std::string& gather_id, const std::string& session_id,
                    int tensor, bool grad, core::DType dtype, int64_t offset,
                    int64_t count, int64_t chunk_bytes, const ChunkSink& sink);
  absl::StatusOr<std::vector<core::TensorStatistics>> Stats(
      const std::string& gather_id, const std::string& session_id,
      const std::vector<int>& tensors, bool grad, int bins);
  // The copy held here (its params or grads buffer): a host copy as a
  // read-only descriptor owned by the caller, whose memory is freed, not
  // pooled, when the gather is released (PooledBuffer::ShareReadOnly); a
  // device copy as the IPC handles of the primary and every replica.
  // FAILED_PRECONDITION when this node holds no copy of the gather.
  absl::StatusOr<LocalCopyShare> ShareCopy(const std::string& gather_id,
                                           bool grad);

  // Two-phase writeback. Prepare stages (nothing in the shards changes) and
  // returns the bytes staged here; Commit copies staged data into the shards
  // and sets the target generations; Abort drops what was staged.
  absl::StatusOr<int64_t> Prepare(const PrepareOp& op);
  absl::Status Commit(const CommitOp& op);
  // Drops what `session_id` staged here; an empty id drops everything
  // staged on this node (after a re-form, once decided commits finished).
  void Abort(const std::string& session_id);
  // After a failure: every copy and staged gradient dropped, the sequence
  // back to 1 for the next epoch.
  void Reset();

  // Frees a gather's copy / a session's private tensors.
  void Release(const std::string& gather_id);
  void ReleaseSession(const std::string& session_id);

 private:
  struct Copy;
  struct ExchangeBuffers;

  // Runs `body` when `sequence` is this node's next collective.
  absl::Status InSequence(uint64_t sequence,
                          const std::function<absl::Status()>& body);
  absl::StatusOr<std::shared_ptr<Copy>> FindCopy(
      const std::string& gather_id) const;
  // The bytes of a tensor as `session_id` sees them; `for_write` with a
  // private copy first copies the tensor for that session. nullptr when the
  // session sees the shared copy and that is in device memory (reach it
  // through Copy::Memory). The caller holds copy.mu (not annotated: Copy is
  // incomplete here).
  absl::StatusOr<uint8_t*> TensorBytes(Copy& copy,
                                       const std::string& session_id,
                                       int tensor, bool grad, bool for_write);
  CollectiveOptions Collective(uint64_t sequence) const;
  // Takes the copy's buffers from the pool (only the bytes no transfer
  // writes, the gaps between tensors, are zeroed: the gather overwrites the
  // rest), or allocates them on the GPU of `store`'s rank that the copy
  // belongs to. The caller holds copy.mu.
  absl::Status AllocateCopy(Copy& copy, const ShardStore& store);
  // The rank whose GPU holds a device copy: the node's first rank when the
  // exchange runs on the device communicator (its GPU is the
  // communicator's), else the home rank under rank0_only, else the lowest
  // rank of this node that the scope gathers from (a node without one uses
  // its first rank).
  int DeviceRank(const Copy& copy, int home_rank) const;
  // A device copy's replicas: one on each further GPU of the node's ranks
  // (none under rank0_only), copied from the gathered primary GPU to GPU.
  // RESOURCE_EXHAUSTED naming the device when one does not fit. The caller
  // holds copy.mu.
  absl::Status Replicate(Copy& copy, const ShardStore& store);
  // Copies this node's ranks' slices into its copy; gradients of ranks
  // without any read as zeros. The caller holds copy.mu and the model's
  // shards lock.
  absl::Status CopyLocalSlices(Copy& copy, ShardStore& store);

  const int node_;
  ModelRegistry* const registry_;
  std::atomic<Communicator*> communicator_;
  bool device_exchange_enabled_ = false;
  std::atomic<Communicator*> device_communicator_{nullptr};
  const absl::Duration collective_timeout_;
  // Session copies' memory, kept warm between gathers.
  const std::shared_ptr<BufferPool> pool_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Copy>> copies_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Counts Reset()s: an operation waiting for its turn across a reset
  // belongs to a dead epoch and must not run in the next one.
  uint64_t resets_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_
