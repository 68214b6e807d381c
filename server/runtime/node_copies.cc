// NodeRuntime: tensor access (write, read, stats) on the copies held here.

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/runtime/gather_copy.h"
#include "server/runtime/node_runtime.h"

namespace summon::server {

absl::StatusOr<uint8_t*> NodeRuntime::TensorBytes(GatherCopy& copy,
                                                  const std::string& session_id,
                                                  int tensor, bool grad,
                                                  bool for_write) {
  const core::SessionTensor& info = copy.layout.tensors[tensor];
  auto it = copy.privates.find({session_id, tensor, grad});
  if (it != copy.privates.end()) return it->second.data();
  uint8_t* shared = copy.HostBytes(grad);
  if (!for_write) {
    return shared == nullptr ? nullptr : shared + info.buffer_offset;
  }
  std::vector<uint8_t> own(static_cast<size_t>(info.bytes()));
  if (absl::Status status =
          copy.CopyOut(grad, info.buffer_offset, own.data(), info.bytes());
      !status.ok()) {
    return status;
  }
  std::vector<uint8_t>& kept = copy.privates[{session_id, tensor, grad}];
  kept = std::move(own);
  return kept.data();
}

absl::Status NodeRuntime::Write(const WriteOp& op) {
  absl::StatusOr<std::shared_ptr<GatherCopy>> found = FindCopy(op.gather_id);
  if (!found.ok()) return found.status();
  GatherCopy& copy = **found;
  if (copy.copy_index < 0) return absl::OkStatus();  // No copy here.
  if (op.tensor < 0 ||
      op.tensor >= static_cast<int>(copy.layout.tensors.size()) ||
      (op.grad && !copy.grads)) {
    return absl::InvalidArgumentError(absl::StrCat("gather ", op.gather_id,
                                                   " has no tensor ", op.tensor,
                                                   op.grad ? " gradient" : ""));
  }
  const core::SessionTensor& info = copy.layout.tensors[op.tensor];
  const int64_t element_size = static_cast<int64_t>(ElementSize(info.dtype));
  if (op.element_offset < 0 ||
      op.element_offset * element_size + static_cast<int64_t>(op.bytes.size()) >
          info.bytes()) {
    return absl::OutOfRangeError(
        absl::StrCat("write outside '", info.fqn, "'"));
  }
  const int64_t at = op.element_offset * element_size;
  const int64_t size = static_cast<int64_t>(op.bytes.size());
  absl::MutexLock copy_lock(&copy.mu);
  if (!op.private_copy) {
    return copy.CopyIn(op.grad, info.buffer_offset + at, op.bytes.data(), size);
  }
  absl::StatusOr<uint8_t*> data =
      TensorBytes(copy, op.session_id, op.tensor, op.grad, true);
  if (!data.ok()) return data.status();
  std::memcpy(*data + at, op.bytes.data(), op.bytes.size());
  return absl::OkStatus();
}

absl::Status NodeRuntime::Read(const std::string& gather_id,
                               const std::string& session_id, int tensor,
                               bool grad, core::DType dtype, int64_t offset,
                               int64_t count, int64_t chunk_bytes,
                               const ChunkSink& sink) {
  absl::StatusOr<std::shared_ptr<GatherCopy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  GatherCopy& copy = **found;
  if (copy.copy_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_, " holds no copy of gather ", gather_id));
  }
  const core::SessionTensor& info = copy.layout.tensors[tensor];
  const int64_t in_size = static_cast<int64_t>(core::ElementSize(info.dtype));
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(dtype));
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / out_size);
  absl::ReleasableMutexLock copy_lock(&copy.mu);
  absl::StatusOr<uint8_t*> found_bytes =
      TensorBytes(copy, session_id, tensor, grad, false);
  if (!found_bytes.ok()) return found_bytes.status();
  // Null: the shared copy is in device memory; each chunk comes to the host.
  const uint8_t* data = *found_bytes;
  const bool immutable =
      data != nullptr && copy.read_only && dtype == info.dtype &&
      copy.privates.find({session_id, tensor, grad}) == copy.privates.end();
  const std::shared_ptr<const void> pin =
      immutable ? std::shared_ptr<const void>(*found) : nullptr;
  // Nothing changes these bytes and the pin keeps them mapped: the lock
  // (which guards the private copies and writes) is not needed to read them.
  if (immutable) copy_lock.Release();
  std::string chunk;
  int64_t done = 0;
  // Hands `n` elements at `in` (the stored dtype) to the sink, converted
  // when asked. Without a conversion the sink reads the bytes in place (the
  // copy itself, under copy.mu unless pinned).
  auto deliver = [&](const uint8_t* in, int64_t n) -> absl::Status {
    absl::string_view bytes(reinterpret_cast<const char*>(in),
                            static_cast<size_t>(n * out_size));
    if (dtype != info.dtype) {
      chunk.resize(bytes.size());
      if (absl::Status status =
              core::ConvertElements(info.dtype, in, dtype, chunk.data(), n);
          !status.ok()) {
        return status;
      }
      bytes = chunk;
    }
    if (!sink(offset + done, bytes, pin)) {
      return absl::CancelledError("reader went away");
    }
    done += n;
    return absl::OkStatus();
  };
  if (data == nullptr && count > 0) {
    // The shared copy is in device memory: it streams to the host chunk by
    // chunk (through two pinned chunks on a GPU, double-buffered).
    const ShardMemory& memory = grad ? *copy.device_grads : *copy.device_params;
    return memory.ReadChunks(info.buffer_offset + offset * in_size,
                             count * in_size, per_chunk * in_size,
                             [&](const uint8_t* in, int64_t bytes) {
                               return deliver(in, bytes / in_size);
                             });
  }
  do {
    const int64_t n = std::min(per_chunk, count - done);
    if (absl::Status status = deliver(
            data == nullptr ? nullptr : data + (offset + done) * in_size, n);
        !status.ok()) {
      return status;
    }
  } while (done < count);
  return absl::OkStatus();
}

absl::StatusOr<LocalCopyShare> NodeRuntime::ShareCopy(
    const std::string& gather_id, bool grad) {
  absl::StatusOr<std::shared_ptr<GatherCopy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  GatherCopy& copy = **found;
  if (copy.copy_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_, " holds no copy of gather ", gather_id,
                     " to map; read it with ReadTensor"));
  }
  if (grad && !copy.grads) {
    return absl::NotFoundError(
        absl::StrCat("gather ", gather_id, " has no gradients"));
  }
  absl::MutexLock copy_lock(&copy.mu);
  LocalCopyShare share;
  if (!copy.on_device) {
    absl::StatusOr<int> fd =
        (grad ? copy.grad_bytes : copy.params).ShareReadOnly();
    if (!fd.ok()) return fd.status();
    share.fd = *fd;
    return share;
  }
  auto add = [&](const ShardMemory& memory) -> absl::Status {
    absl::StatusOr<std::string> handle = memory.IpcHandle();
    if (!handle.ok()) return handle.status();
    LocalCopyShare::DeviceCopy device_copy;
    device_copy.device = memory.device();
    device_copy.ipc_handle = *std::move(handle);
    for (int rank : copy.model->local_ranks) {
      if (copy.model->store->DeviceOf(rank) == memory.device()) {
        device_copy.ranks.push_back(rank);
      }
    }
    share.device_copies.push_back(std::move(device_copy));
    return absl::OkStatus();
  };
  if (absl::Status added = add(grad ? *copy.device_grads : *copy.device_params);
      !added.ok()) {
    return added;
  }
  for (const DeviceReplica& replica : copy.replicas) {
    if (absl::Status added = add(grad ? *replica.grads : *replica.params);
        !added.ok()) {
      return added;
    }
  }
  std::sort(
      share.device_copies.begin(), share.device_copies.end(),
      [](const LocalCopyShare::DeviceCopy& a,
         const LocalCopyShare::DeviceCopy& b) { return a.device < b.device; });
  return share;
}

absl::StatusOr<std::vector<core::TensorStatistics>> NodeRuntime::Stats(
    const std::string& gather_id, const std::string& session_id,
    const std::vector<int>& tensors, bool grad, int bins) {
  absl::StatusOr<std::shared_ptr<GatherCopy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  GatherCopy& copy = **found;
  if (copy.copy_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_, " holds no copy of gather ", gather_id));
  }
  std::vector<core::TensorStatistics> result;
  absl::MutexLock copy_lock(&copy.mu);
  for (int tensor : tensors) {
    const core::SessionTensor& info = copy.layout.tensors[tensor];
    absl::StatusOr<uint8_t*> data =
        TensorBytes(copy, session_id, tensor, grad, false);
    if (!data.ok()) return data.status();
    // A shared copy in device memory is summarised where it is: only the
    // numbers come back (CUDA kernels for a GPU).
    absl::StatusOr<core::TensorStatistics> stats =
        *data != nullptr
            ? core::ComputeTensorStatistics(info.dtype, *data, info.numel, bins)
            : (grad ? copy.device_grads : copy.device_params)
                  ->Statistics(info.buffer_offset, info.dtype, info.numel,
                               bins);
    if (!stats.ok()) return stats.status();
    result.push_back(*std::move(stats));
  }
  return result;
}

}  // namespace summon::server
