// NodeRuntime: where a gather's copy lives on this node (host memory from
// the buffer pool, or device memory: the primary copy and one replica per
// further GPU of the node) and how this node's own slices get into it.

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "server/runtime/gather_copy.h"
#include "server/runtime/node_runtime.h"
#include "server/store/shard_store.h"

namespace summon::server {

namespace {

// The copy's bytes no transfer writes: the alignment gaps between tensors.
// A pooled buffer holds whatever its last user left there, and reads of a
// whole buffer must not see it.
void ZeroGaps(const core::SessionBufferLayout& layout, uint8_t* data) {
  if (layout.total_bytes == 0) return;  // No buffer at all (data is null).
  int64_t end = 0;
  for (const core::SessionTensor& tensor : layout.tensors) {
    std::memset(data + end, 0, tensor.buffer_offset - end);
    end = tensor.buffer_offset + tensor.bytes();
  }
  std::memset(data + end, 0, layout.total_bytes - end);
}

}  // namespace

int NodeRuntime::DeviceRank(const GatherCopy& copy, int home_rank) const {
  if (copy.device_exchange) return copy.model->local_ranks.front();
  const core::Topology& topology = copy.model->spec.groups.topology;
  if (copy.rank0_only && topology.NodeOf(home_rank) == node_) return home_rank;
  int first = -1;
  for (const core::Transfer& t : copy.plan.transfers) {
    if (t.copy == copy.copy_index && topology.NodeOf(t.rank) == node_ &&
        (first < 0 || t.rank < first)) {
      first = t.rank;
    }
  }
  return first >= 0 ? first : copy.model->local_ranks.front();
}

absl::Status NodeRuntime::AllocateCopy(GatherCopy& copy,
                                       const ShardStore& store) {
  const int64_t total = copy.layout.total_bytes;
  if (copy.on_device) {
    // Fresh device memory is zero-filled, gaps included.
    absl::StatusOr<std::unique_ptr<ShardMemory>> params =
        store.AllocateBeside(copy.device_rank, total);
    if (!params.ok()) return params.status();
    copy.device_params = *std::move(params);
    if (!copy.grads) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<ShardMemory>> grads =
        store.AllocateBeside(copy.device_rank, total);
    if (!grads.ok()) return grads.status();
    copy.device_grads = *std::move(grads);
    return absl::OkStatus();
  }
  absl::StatusOr<PooledBuffer> params = pool_->Acquire(total);
  if (!params.ok()) return params.status();
  copy.params = *std::move(params);
  ZeroGaps(copy.layout, copy.params.data());
  if (!copy.grads) return absl::OkStatus();
  absl::StatusOr<PooledBuffer> grads = pool_->Acquire(total);
  if (!grads.ok()) return grads.status();
  copy.grad_bytes = *std::move(grads);
  ZeroGaps(copy.layout, copy.grad_bytes.data());
  return absl::OkStatus();
}

absl::Status NodeRuntime::CopyLocalSlices(GatherCopy& copy, ShardStore& store,
                                          int64_t begin, int64_t end) {
  const core::Topology& topology = copy.model->spec.groups.topology;
  // One transfer of params or grads, cut to [begin, end) of the copy: device
  // to device for a copy in device memory, to the host otherwise.
  auto fill = [&](const core::Transfer& t, bool grads)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.mu) -> absl::Status {
    if (copy.on_device) {
      return store.CopyShardTo(t.rank, t.unit, grads, t.shard_offset,
                               grads ? *copy.device_grads : *copy.device_params,
                               t.buffer_offset, t.bytes);
    }
    return store.ReadShard(t.rank, t.unit, grads, t.shard_offset,
                           copy.HostBytes(grads) + t.buffer_offset, t.bytes);
  };
  for (core::Transfer t : copy.plan.transfers) {
    const int64_t from = std::max(begin, t.buffer_offset);
    const int64_t to = std::min(end, t.buffer_offset + t.bytes);
    if (t.copy != copy.copy_index || topology.NodeOf(t.rank) != node_ ||
        from >= to) {
      continue;
    }
    t.shard_offset += from - t.buffer_offset;
    t.buffer_offset = from;
    t.bytes = to - from;
    if (absl::Status status = fill(t, /*grads=*/false); !status.ok()) {
      return status;
    }
    if (!copy.grads) continue;
    if (store.HasGrads(t.rank)) {
      if (absl::Status status = fill(t, /*grads=*/true); !status.ok()) {
        return status;
      }
    } else if (!copy.on_device) {
      // Ranks without grads read as zeros (fresh device memory already is).
      std::memset(copy.HostBytes(true) + t.buffer_offset, 0, t.bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status NodeRuntime::Replicate(GatherCopy& copy, const ShardStore& store) {
  if (!copy.on_device || copy.rank0_only) return absl::OkStatus();
  const int64_t total = copy.layout.total_bytes;
  std::set<int> placed = {copy.device_params->device()};
  for (int rank : copy.model->local_ranks) {
    const int device = store.DeviceOf(rank);
    if (!placed.insert(device).second) continue;  // This GPU has a copy.
    DeviceReplica replica;
    replica.device = device;
    for (bool grad : {false, true}) {
      if (grad && !copy.grads) break;
      absl::StatusOr<std::unique_ptr<ShardMemory>> memory =
          store.AllocateBeside(rank, total);
      if (!memory.ok()) return memory.status();
      // Peer to peer from the primary's GPU, gaps included.
      if (absl::Status copied = (*memory)->CopyFrom(
              grad ? *copy.device_grads : *copy.device_params, 0, total);
          !copied.ok()) {
        return copied;
      }
      (grad ? replica.grads : replica.params) = *std::move(memory);
    }
    copy.replicas.push_back(std::move(replica));
  }
  return absl::OkStatus();
}

}  // namespace summon::server
