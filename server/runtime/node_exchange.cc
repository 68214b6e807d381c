// NodeRuntime: the buffers of a gather's exchange between nodes, in host
// memory for Gloo or in device memory for the device communicator (NCCL).

#include <utility>

#include "absl/status/status.h"
#include "core/plan.h"
#include "server/runtime/gather_copy.h"
#include "server/runtime/node_runtime.h"

namespace summon::server {
namespace {

// Zero-filled memory beside `rank`'s shards (the node's first rank's: the
// device communicator's GPU). Null for no bytes.
absl::StatusOr<std::unique_ptr<ShardMemory>> DeviceBuffer(
    const ShardStore& store, int rank, int64_t bytes) {
  if (bytes == 0) return std::unique_ptr<ShardMemory>();
  return store.AllocateBeside(rank, bytes);
}

}  // namespace

absl::Status ExchangeBuffers::Pack(
    const GatherCopy& copy, const ShardStore& store,
    const std::vector<core::ShardRange>& ranges) {
  const int64_t params_bytes = core::RangesBytes(ranges);
  const int64_t bytes = params_bytes * (copy.grads ? 2 : 1);
  if (copy.device_exchange) {
    absl::StatusOr<std::unique_ptr<ShardMemory>> buffer =
        DeviceBuffer(store, copy.model->local_ranks.front(), bytes);
    if (!buffer.ok()) return buffer.status();
    device_send = *std::move(buffer);
  } else {
    absl::StatusOr<memory::FreshMemory> buffer =
        memory::FreshMemory::Map(bytes);
    if (!buffer.ok()) return buffer.status();
    host_send = *std::move(buffer);
  }
  // One range of params or grads into the buffer at `at`.
  auto put = [&](int rank, int unit, bool grads, int64_t offset, int64_t at,
                 int64_t n) {
    return copy.device_exchange ? store.CopyShardTo(rank, unit, grads, offset,
                                                    *device_send, at, n)
                                : store.ReadShard(rank, unit, grads, offset,
                                                  host_send.data() + at, n);
  };
  int64_t at = 0;
  for (const auto& [rank, unit, offset, n] : ranges) {
    absl::Status packed = put(rank, unit, /*grads=*/false, offset, at, n);
    // Ranks without grads send zeros: the buffer is zero-filled (device) or
    // fresh (host).
    if (packed.ok() && copy.grads && store.HasGrads(rank)) {
      packed = put(rank, unit, /*grads=*/true, offset, params_bytes + at, n);
    }
    if (!packed.ok()) return packed;
    at += n;
  }
  return absl::OkStatus();
}

absl::Status ExchangeBuffers::MakeReceive(const GatherCopy& copy,
                                          const ShardStore& store,
                                          int64_t bytes, bool device) {
  if (!device) {
    absl::StatusOr<memory::FreshMemory> buffer =
        memory::FreshMemory::Map(bytes);
    if (!buffer.ok()) return buffer.status();
    host_recv = *std::move(buffer);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ShardMemory>> buffer =
      DeviceBuffer(store, copy.model->local_ranks.front(), bytes);
  if (!buffer.ok()) return buffer.status();
  device_recv = *std::move(buffer);
  return absl::OkStatus();
}

const void* ExchangeBuffers::SendData() const {
  if (device_send != nullptr) return device_send->device_data();
  return host_send.empty() ? nullptr : host_send.data();
}

void* ExchangeBuffers::ReceiveData() const {
  if (device_recv != nullptr) return device_recv->device_data();
  return host_recv.empty() ? nullptr : const_cast<uint8_t*>(host_recv.data());
}

absl::Status ExchangeBuffers::Unpack(GatherCopy& copy, bool grad, int64_t from,
                                     int64_t to, int64_t bytes) const {
  if (device_recv != nullptr) {
    ShardMemory& target = grad ? *copy.device_grads : *copy.device_params;
    return target.CopyRange(*device_recv, from, to, bytes);
  }
  copy.mu.AssertHeld();
  return copy.CopyIn(grad, to, host_recv.data() + from, bytes);
}

}  // namespace summon::server
