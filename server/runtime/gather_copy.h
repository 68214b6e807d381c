#ifndef SUMMON_SERVER_RUNTIME_GATHER_COPY_H_
#define SUMMON_SERVER_RUNTIME_GATHER_COPY_H_

// NodeRuntime's records of a gather, shared by its source files: the gather
// as this node knows it (GatherCopy: the plan and, when the plan places a
// copy here, its bytes in host memory or on the GPUs with their
// DeviceReplicas) and the buffers of its exchange between nodes
// (ExchangeBuffers, node_exchange.cc). Private to server/runtime.

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/plan.h"
#include "memory/fresh_memory.h"
#include "server/model/model_registry.h"
#include "server/runtime/buffer_pool.h"
#include "server/store/shard_memory.h"
#include "server/store/shard_store.h"

namespace summon::server {

// One device copy beyond the primary: the same bytes on a further GPU of
// the node's ranks (GatherCopy::replicas).
struct DeviceReplica {
  int device = -1;
  std::unique_ptr<ShardMemory> params;
  std::unique_ptr<ShardMemory> grads;  // Null without gradients.
};

// A gather as this node knows it: the plan (identical on every node) and,
// when the plan places a copy here, its bytes.
struct GatherCopy {
  std::shared_ptr<ModelEntry> model;
  core::SessionBufferLayout layout;
  core::GatherPlan plan;
  // The nodes outside the epoch the gather ran in: its writeback leaves
  // their ranks out too.
  std::set<int> absent;
  int copy_index = -1;  // The plan's copy held on this node; -1: none.
  bool rank0_only = false;
  int home_node = 0;
  bool grads = false;
  bool read_only = false;  // GatherOp::read_only.

  // In device memory (GatherOp::offload_to_cpu unset, shards on a device):
  // the bytes are in device_params/device_grads, not params/grad_bytes.
  // That primary copy is gathered into; reads, statistics and rank0_only
  // scatters use it.
  bool on_device = false;
  int device_rank = -1;  // Its GPU is this rank's (DeviceRank).
  // The exchange between nodes runs on the device communicator, in device
  // memory on the first rank's GPU (NodeRuntime::EnableDeviceExchange).
  bool device_exchange = false;

  absl::Mutex mu;
  PooledBuffer params ABSL_GUARDED_BY(mu);
  PooledBuffer grad_bytes ABSL_GUARDED_BY(mu);
  std::unique_ptr<ShardMemory> device_params ABSL_GUARDED_BY(mu);
  std::unique_ptr<ShardMemory> device_grads ABSL_GUARDED_BY(mu);
  // The same copy on each further GPU of the node's ranks
  // (docs/design.md#placement: one copy per GPU of the scope; none under
  // rank0_only), filled from the primary after the gather
  // (NodeRuntime::Replicate). Writes land in every one; a writeback stages
  // each rank's slices from the copy on that rank's GPU, as FSDP writes each
  // rank's chunk back from its own unsharded parameters.
  std::vector<DeviceReplica> replicas ABSL_GUARDED_BY(mu);
  // (session, tensor, grad) -> that session's own copy of the tensor.
  std::map<std::tuple<std::string, int, bool>, std::vector<uint8_t>> privates
      ABSL_GUARDED_BY(mu);

  // The shared copy's host bytes (params or grads), or nullptr when it is
  // in device memory.
  uint8_t* HostBytes(bool grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return on_device ? nullptr : (grad ? grad_bytes : params).data();
  }
  // Host bytes to and from [offset, offset + bytes) of the shared copy,
  // wherever it is.
  absl::Status CopyOut(bool grad, int64_t offset, void* to, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (on_device)
      return (grad ? device_grads : device_params)->Read(offset, to, bytes);
    std::memcpy(to, HostBytes(grad) + offset, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  // Into every device copy (the primary and its replicas) before returning.
  absl::Status CopyIn(bool grad, int64_t offset, const void* from,
                      int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!on_device) {
      std::memcpy(HostBytes(grad) + offset, from, static_cast<size_t>(bytes));
      return absl::OkStatus();
    }
    absl::Status status =
        (grad ? device_grads : device_params)->Write(offset, from, bytes);
    for (DeviceReplica& replica : replicas) {
      if (!status.ok()) break;
      status =
          (grad ? replica.grads : replica.params)->Write(offset, from, bytes);
    }
    return status;
  }
  // The device copy on GPU `device` (a replica, or the primary when none is
  // there): where a writeback reads the slices of a rank on that GPU.
  const ShardMemory& DeviceCopyOn(int device, bool grad) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (const DeviceReplica& replica : replicas) {
      if (replica.device == device)
        return grad ? *replica.grads : *replica.params;
    }
    return grad ? *device_grads : *device_params;
  }
};

// The bytes a gather moves between nodes when they are not the copy itself
// (node_exchange.cc): this node's packed sends and the received area, in
// host memory for Gloo, or in device memory on the device communicator's
// GPU (the node's first rank's) for a device exchange.
struct ExchangeBuffers {
  // Fresh zero pages with huge pages asked for (memory/fresh_memory.h): a
  // gather's exchange buffers are new for each gather, and page-faulting
  // them 4 KiB at a time cost as much as the exchange.
  memory::FreshMemory host_send;
  memory::FreshMemory host_recv;
  std::unique_ptr<ShardMemory> device_send;
  std::unique_ptr<ShardMemory> device_recv;

  // This node's `ranges` packed for sending, parameters then (when the
  // gather has them) gradients, read shard to host or copied shard to
  // buffer on the device; gradients of ranks without any are zeros. The
  // caller holds the model's shards lock.
  absl::Status Pack(const GatherCopy& copy, const ShardStore& store,
                    const std::vector<core::ShardRange>& ranges);
  // A received area of `bytes`, where the exchange runs.
  absl::Status MakeReceive(const GatherCopy& copy, const ShardStore& store,
                           int64_t bytes, bool device);
  // What the communicator sends from and receives into (null when empty).
  const void* SendData() const;
  void* ReceiveData() const;
  // [from, from + bytes) of the received area into the copy's params or
  // grads at `to`: device to device, or host bytes copied in. The caller
  // holds copy.mu.
  absl::Status Unpack(GatherCopy& copy, bool grad, int64_t from, int64_t to,
                      int64_t bytes) const;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_GATHER_COPY_H_
