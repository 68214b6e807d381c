// NodeRuntime: the buffers of a gather's exchange between nodes, in host
// memory for Gloo or in device memory for the device communicator (NCCL).

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "server/runtime/fault_points.h"
#include "server/runtime/gather_copy.h"
#include "server/runtime/node_runtime.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// Zero-filled memory beside `rank`'s shards (the node's first rank's: the
// device communicator's GPU). Null for no bytes.
absl::StatusOr<std::unique_ptr<ShardMemory>> DeviceBuffer(
    const ShardStore& store, int rank, int64_t bytes) {
  if (bytes == 0) return std::unique_ptr<ShardMemory>();
  return store.AllocateBeside(rank, bytes);
}

// A pipelined gather's parts: at least 8 MiB each (below that a part's
// round trip costs more than the copy it hides), at most `most` (by
// default 8: the local copy left unhidden is one part's, 1/8 of it; never
// above 256, AllGatherAt's parts).
constexpr int64_t kMinPartBytes = int64_t{8} << 20;

int PipelineParts(int64_t bytes, int most) {
  return static_cast<int>(
      std::min<int64_t>(std::clamp(most, 1, 256), bytes / kMinPartBytes));
}

}  // namespace

bool NodeRuntime::Pipelines(const GatherCopy& copy) const {
  const core::ModelSpec& spec = copy.model->spec;
  const int nodes = spec.groups.topology.nodes;
  // on_device and device_exchange are alike on every node here: each holds
  // a copy and the nodes are configured alike.
  if (nodes < 2 || copy.grads || copy.rank0_only || copy.on_device ||
      copy.device_exchange ||
      PipelineParts(copy.layout.total_bytes, gather_parts_) < 2 ||
      static_cast<int>(copy.plan.copies.size()) != nodes) {
    return false;
  }
  for (int c = 0; c < nodes; ++c) {
    if (!core::ExchangeLandsInCopy(spec, copy.plan, c)) return false;
  }
  return true;
}

absl::Status NodeRuntime::PipelinedGather(
    GatherCopy& copy, const std::vector<int64_t>& slot_offsets,
    const std::vector<int64_t>& slot_bytes, uint64_t sequence) {
  copy.mu.AssertHeld();
  Communicator* communicator = communicator_.load();
  if (communicator == nullptr) {
    return absl::UnavailableError("the cluster is not connected yet");
  }
  const int nodes = static_cast<int>(slot_offsets.size());
  const int parts = PipelineParts(copy.layout.total_bytes, gather_parts_);
  // Where part k of node n's slot starts (k == parts: where the slot ends).
  // Every node cuts every slot alike.
  auto cut = [&](int n, int k) {
    return slot_offsets[n] + slot_bytes[n] * k / parts;
  };
  ModelEntry& entry = *copy.model;
  ShardStore& store = *entry.store;
  // Held until the filler is done: this node's part of the snapshot is
  // consistent, as in the unpipelined gather.
  absl::ReaderMutexLock shards_lock(&entry.shards_mu);
  std::vector<absl::Status> filled(parts);
  std::vector<absl::Notification> ready(parts);
  std::atomic<bool> stop{false};
  // Fills this node's slot part by part, each part announced once copied.
  // It runs while this thread holds copy.mu and the shards lock for it,
  // and is joined before either is released.
  absl::Duration fill_time;
  std::thread filler([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const absl::Time began = absl::Now();
    for (int k = 0; k < parts; ++k) {
      filled[k] = stop.load() ? absl::CancelledError("the exchange failed")
                              : CopyLocalSlices(copy, store, cut(node_, k),
                                                cut(node_, k + 1));
      ready[k].Notify();
    }
    fill_time = absl::Now() - began;
  });
  FaultPoint("gather.before_exchange");
  std::vector<Communicator::GatherPart> exchanged(parts);
  for (int k = 0; k < parts; ++k) {
    exchanged[k].offsets.resize(nodes);
    exchanged[k].bytes.resize(nodes);
    for (int n = 0; n < nodes; ++n) {
      exchanged[k].offsets[n] = cut(n, k);
      exchanged[k].bytes[n] = cut(n, k + 1) - cut(n, k);
    }
  }
  // What the exchange waited for the local copy: the part of it that the
  // overlap did not hide (the debug log's profile of each gather).
  absl::Duration waited;
  const absl::Time start = absl::Now();
  const absl::Status status = communicator->AllGatherAtParts(
      copy.params.data(), exchanged,
      [&](int k) {
        const absl::Time before = absl::Now();
        ready[k].WaitForNotification();
        waited += absl::Now() - before;
        return filled[k];
      },
      Collective(sequence));
  const absl::Duration took = absl::Now() - start;
  stop.store(true);
  filler.join();
  spdlog::debug(
      "gather {} on node {}: {} bytes pipelined in {} parts, {} ms; the "
      "exchange waited {} ms for the local copy ({} ms in all)",
      sequence, node_, copy.layout.total_bytes, parts,
      absl::ToDoubleMilliseconds(took), absl::ToDoubleMilliseconds(waited),
      absl::ToDoubleMilliseconds(fill_time));
  return status;
}

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
