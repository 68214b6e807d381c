// NodeRuntime: tensor access (write, read, stats) on the copies held here.

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/node_runtime.h"
#include "server/node_runtime_internal.h"

namespace summon::server {

uint8_t* NodeRuntime::TensorBytes(Copy& copy, const std::string& session_id,
                                  int tensor, bool grad, bool for_write) {
  const core::SessionTensor& info = copy.layout.tensors[tensor];
  auto it = copy.privates.find({session_id, tensor, grad});
  if (it != copy.privates.end()) return it->second.data();
  uint8_t* shared =
      (grad ? copy.grad_bytes.data() : copy.params.data()) + info.buffer_offset;
  if (!for_write) return shared;
  std::vector<uint8_t>& own = copy.privates[{session_id, tensor, grad}];
  own.assign(shared, shared + info.bytes());
  return own.data();
}

absl::Status NodeRuntime::Write(const WriteOp& op) {
  absl::StatusOr<std::shared_ptr<Copy>> found = FindCopy(op.gather_id);
  if (!found.ok()) return found.status();
  Copy& copy = **found;
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
  absl::MutexLock copy_lock(&copy.mu);
  uint8_t* data =
      op.private_copy
          ? TensorBytes(copy, op.session_id, op.tensor, op.grad, true)
          : (op.grad ? copy.grad_bytes.data() : copy.params.data()) +
                info.buffer_offset;
  std::memcpy(data + op.element_offset * element_size, op.bytes.data(),
              op.bytes.size());
  return absl::OkStatus();
}

absl::Status NodeRuntime::Read(const std::string& gather_id,
                               const std::string& session_id, int tensor,
                               bool grad, core::DType dtype, int64_t offset,
                               int64_t count, int64_t chunk_bytes,
                               const ChunkSink& sink) {
  absl::StatusOr<std::shared_ptr<Copy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  Copy& copy = **found;
  if (copy.copy_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_, " holds no copy of gather ", gather_id));
  }
  const core::SessionTensor& info = copy.layout.tensors[tensor];
  const int64_t in_size = static_cast<int64_t>(core::ElementSize(info.dtype));
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(dtype));
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / out_size);
  absl::ReleasableMutexLock copy_lock(&copy.mu);
  const uint8_t* data = TensorBytes(copy, session_id, tensor, grad, false);
  const bool immutable =
      copy.read_only && dtype == info.dtype &&
      copy.privates.find({session_id, tensor, grad}) == copy.privates.end();
  const std::shared_ptr<const void> pin =
      immutable ? std::shared_ptr<const void>(*found) : nullptr;
  // Nothing changes these bytes and the pin keeps them mapped: the lock
  // (which guards the private copies and writes) is not needed to read them.
  if (immutable) copy_lock.Release();
  std::string chunk;
  int64_t done = 0;
  do {
    const int64_t n = std::min(per_chunk, count - done);
    // Without a conversion the sink reads the copy itself, not a chunk
    // copied from it (under copy.mu unless pinned).
    absl::string_view bytes(
        reinterpret_cast<const char*>(data + (offset + done) * in_size),
        static_cast<size_t>(n * out_size));
    if (dtype != info.dtype) {
      chunk.resize(bytes.size());
      if (absl::Status status = core::ConvertElements(
              info.dtype, reinterpret_cast<const uint8_t*>(bytes.data()), dtype,
              chunk.data(), n);
          !status.ok()) {
        return status;
      }
      bytes = chunk;
    }
    if (!sink(offset + done, bytes, pin)) {
      return absl::CancelledError("reader went away");
    }
    done += n;
  } while (done < count);
  return absl::OkStatus();
}

absl::StatusOr<int> NodeRuntime::ShareCopy(const std::string& gather_id,
                                           bool grad) {
  absl::StatusOr<std::shared_ptr<Copy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  Copy& copy = **found;
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
  return (grad ? copy.grad_bytes : copy.params).ShareReadOnly();
}

absl::StatusOr<std::vector<TensorStatistics>> NodeRuntime::Stats(
    const std::string& gather_id, const std::string& session_id,
    const std::vector<int>& tensors, bool grad, int bins) {
  absl::StatusOr<std::shared_ptr<Copy>> found = FindCopy(gather_id);
  if (!found.ok()) return found.status();
  Copy& copy = **found;
  if (copy.copy_index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_, " holds no copy of gather ", gather_id));
  }
  std::vector<TensorStatistics> result;
  absl::MutexLock copy_lock(&copy.mu);
  for (int tensor : tensors) {
    const core::SessionTensor& info = copy.layout.tensors[tensor];
    absl::StatusOr<TensorStatistics> stats = ComputeTensorStatistics(
        info.dtype, TensorBytes(copy, session_id, tensor, grad, false),
        info.numel, bins);
    if (!stats.ok()) return stats.status();
    result.push_back(*std::move(stats));
  }
  return result;
}

}  // namespace summon::server
