#ifndef SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_
#define SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
#include "server/runtime/node_op_types.h"

namespace summon::server {

struct GatherCopy;  // gather_copy.h: a gather as this node knows it.

// One node's data plane: the session copies placed on this node and the
// movement of shard bytes into and out of them, by the core's plans. Every
// node of a cluster runs the same operations; collectives (gathers and the
// scatter of a rank0_only writeback) run strictly in the leader's sequence
// order, so concurrent sessions can never deadlock or interleave wrongly. A
// single node is the same code over a one-rank communicator.
class NodeRuntime {
 public:
  // `copy_pool`: where session copies' memory comes from (the daemon's,
  // sized by --copy-pool-bytes and --copy-pool-idle); null: a pool of its
  // own with BufferPool's default options.
  NodeRuntime(int node, ModelRegistry* registry, Communicator* communicator,
              absl::Duration collective_timeout,
              std::shared_ptr<BufferPool> copy_pool = nullptr);
  ~NodeRuntime();

  int node() const { return node_; }
  // A cluster's communicator exists only once every node has joined.
  void SetCommunicator(Communicator* communicator);
  // Gathers of session copies in device memory exchange on the device
  // communicator (NCCL) instead of Gloo through host buffers. Enabled once,
  // at start, on every node of the cluster alike (the choice must agree
  // across nodes); the communicator itself comes with each READY.
  void EnableDeviceExchange() { device_exchange_enabled_ = true; }
  // Most parts a pipelined gather runs in (summond --gather-parts; below 2:
  // none is pipelined). Before the first gather; every node alike.
  void SetGatherParts(int parts) { gather_parts_ = parts; }
  void SetDeviceCommunicator(Communicator* communicator);
  // The nodes outside the cluster's current epoch (a cluster formed on its
  // survivors): gathers place no copy there and take no slice from there,
  // and writebacks leave their ranks out (core::NodeSets). Set with each
  // READY, alike on every member.
  void SetAbsentNodes(std::set<int> absent);

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

  // Two-phase writeback (node_writeback.cc). Prepare stages (nothing in the
  // shards changes) and returns the bytes staged here; Commit copies staged
  // data into the shards and sets the target generations; Abort drops what
  // was staged.
  absl::StatusOr<int64_t> Prepare(const PrepareOp& op);
  absl::Status Commit(const CommitOp& op);
  // Takes `sequence`'s turn without running anything: the leader refused
  // its own part of an operation it sent to the other nodes (it may not act
  // then), and its later operations must not wait for that number for the
  // rest of the epoch (issue 31). DEADLINE_EXCEEDED as InSequence.
  absl::Status SkipSequence(uint64_t sequence);
  // Sets this node's generations to an optimizer step's (in sequence).
  absl::Status SetGenerations(const GenerationsOp& op);
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
  // How long a gather waits for this epoch's communicator (Gather).
  static constexpr absl::Duration kConnectWait = absl::Seconds(2);
  // Runs `body` when `sequence` is this node's next collective; ABORTED
  // when a Reset() came after `taken_in` (the Resets() count when the
  // operation arrived; nullopt: now), as the operation's epoch ended.
  absl::Status InSequence(uint64_t sequence,
                          const std::function<absl::Status()>& body,
                          std::optional<uint64_t> taken_in = std::nullopt);
  uint64_t Resets() const;
  absl::StatusOr<std::shared_ptr<GatherCopy>> FindCopy(
      const std::string& gather_id) const;
  // The bytes of a tensor as `session_id` sees them; `for_write` with a
  // private copy first copies the tensor for that session. nullptr when the
  // session sees the shared copy and that is in device memory (reach it
  // through GatherCopy::CopyOut/CopyIn). The caller holds copy.mu (not
  // annotated: GatherCopy is incomplete here).
  absl::StatusOr<uint8_t*> TensorBytes(GatherCopy& copy,
                                       const std::string& session_id,
                                       int tensor, bool grad, bool for_write);
  CollectiveOptions Collective(uint64_t sequence) const;
  // Takes the copy's buffers from the pool (only the bytes no transfer
  // writes, the gaps between tensors, are zeroed: the gather overwrites the
  // rest), or allocates them on the GPU of `store`'s rank that the copy
  // belongs to. The caller holds copy.mu.
  absl::Status AllocateCopy(GatherCopy& copy, const ShardStore& store);
  // The rank whose GPU holds a device copy: the node's first rank when the
  // exchange runs on the device communicator (its GPU is the
  // communicator's), else the home rank under rank0_only, else the lowest
  // rank of this node that the scope gathers from (a node without one uses
  // its first rank).
  int DeviceRank(const GatherCopy& copy, int home_rank) const;
  // A device copy's replicas: one on each further GPU of the node's ranks
  // (none under rank0_only), copied from the gathered primary GPU to GPU.
  // RESOURCE_EXHAUSTED naming the device when one does not fit. The caller
  // holds copy.mu.
  absl::Status Replicate(GatherCopy& copy, const ShardStore& store);
  // Copies this node's ranks' slices into its copy, those bytes of them
  // that fall in [begin, end) of the copy; gradients of ranks without any
  // read as zeros. The caller holds copy.mu and the model's shards lock.
  absl::Status CopyLocalSlices(GatherCopy& copy, ShardStore& store,
                               int64_t begin = 0, int64_t end = INT64_MAX);
  // Whether a gather's exchange runs pipelined (PipelinedGather): every
  // node holds a host copy its peers' slots land in, no gradients, and
  // enough bytes for two parts. Every node decides alike.
  bool Pipelines(const GatherCopy& copy) const;
  // The local copy and the exchange of such a gather, overlapped: this
  // node's slot of the copy is filled part by part on a second thread while
  // the previous part is exchanged (Communicator::AllGatherAt, in place).
  // The caller holds copy.mu; this takes the model's shards lock.
  absl::Status PipelinedGather(GatherCopy& copy,
                               const std::vector<int64_t>& slot_offsets,
                               const std::vector<int64_t>& slot_bytes,
                               uint64_t sequence);

  const int node_;
  ModelRegistry* const registry_;
  std::atomic<Communicator*> communicator_;
  bool device_exchange_enabled_ = false;
  int gather_parts_ = 8;
  std::atomic<Communicator*> device_communicator_{nullptr};
  const absl::Duration collective_timeout_;
  // Session copies' memory, kept warm between gathers.
  const std::shared_ptr<BufferPool> pool_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<GatherCopy>> copies_
      ABSL_GUARDED_BY(mu_);
  std::set<int> absent_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Counts Reset()s: an operation waiting for its turn across a reset
  // belongs to a dead epoch and must not run in the next one.
  uint64_t resets_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_NODE_RUNTIME_H_
