// SessionManager: tensor access (read, write, stats) on open sessions.

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/session/session_internal.h"
#include "server/session/session_manager.h"

namespace summon::server {
namespace {

constexpr int64_t kMinChunkBytes = 4 << 10;
// Payload of one ReadTensor message: with its few fields (and the tensor's
// description in the first one) the message stays under the 4 MiB that
// stock gRPC clients accept by default.
constexpr int64_t kMaxChunkBytes = (4 << 20) - (64 << 10);
constexpr int64_t kDefaultChunkBytes = 1 << 20;

absl::Status NotOpen(const std::string& id, core::SessionState state) {
  return absl::FailedPreconditionError(absl::StrCat(
      "session ", id, " is ", core::SessionStateName(state), ", not OPEN"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<SessionRecord>> SessionManager::FindOpenSession(
    const std::string& id, const std::string& principal) {
  absl::StatusOr<std::shared_ptr<SessionRecord>> found =
      FindSession(id, principal);
  if (!found.ok()) return found.status();
  if ((*found)->state != core::SessionState::kOpen) {
    return NotOpen(id, (*found)->state);
  }
  // R25: any use of a session (read, stats, write, map) renews its lease.
  (*found)->lease_deadline =
      core::RenewLease(options_.clock(), (*found)->options.lease);
  return found;
}

absl::StatusOr<int> SessionManager::FindTensor(const SessionRecord& session,
                                               const std::string& fqn,
                                               bool grad) const {
  const GatherRecord& gather = *session.gather;
  std::string primary = fqn;
  if (auto alias = session.model->spec.aliases.find(fqn);
      alias != session.model->spec.aliases.end()) {
    primary = alias->second;
  }
  const int index = gather.layout.Find(primary);
  if (index < 0) {
    return absl::NotFoundError(
        absl::StrCat("session ", session.id, " has no tensor '", fqn, "'"));
  }
  if (grad && !gather.has_grads) {
    return absl::NotFoundError(absl::StrCat(
        "session ", session.id, " has no gradients",
        session.options.with_grads ? " (no scoped rank has gradient shards)"
                                   : " (opened without gradients: "
                                     "--with-grads, with_grads)"));
  }
  return index;
}

absl::Status SessionManager::Read(const std::string& id, const std::string& fqn,
                                  bool grad, std::optional<core::DType> dtype,
                                  int64_t offset, std::optional<int64_t> count,
                                  int64_t chunk_bytes,
                                  const std::string& principal,
                                  const ChunkSink& sink) {
  std::shared_ptr<SessionRecord> session;
  int tensor = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SessionRecord>> found =
        FindOpenSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    absl::StatusOr<int> index = FindTensor(*session, fqn, grad);
    if (!index.ok()) return index.status();
    tensor = *index;
  }
  const core::SessionTensor& info = session->gather->layout.tensors[tensor];
  const core::DType out_dtype =
      dtype.value_or(session->options.read_dtype.value_or(info.dtype));
  if (!core::IsFloatingPoint(out_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read as ", core::DTypeName(out_dtype),
                     ": only floating-point dtypes"));
  }
  const int64_t total =
      count.value_or(info.numel - std::min(offset, info.numel));
  if (offset < 0 || total < 0 || offset > info.numel ||
      total > info.numel - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "elements [", offset, ", ", offset, "+", total, ") are outside '",
        info.fqn, "' of ", info.numel, " elements"));
  }
  if (chunk_bytes == 0) chunk_bytes = kDefaultChunkBytes;
  chunk_bytes = std::clamp(chunk_bytes, kMinChunkBytes, kMaxChunkBytes);
  return ops_->Read(session->gather->id, session->id, tensor, grad, out_dtype,
                    offset, total, chunk_bytes, sink);
}

absl::StatusOr<core::SessionTensor> SessionManager::DescribeTensor(
    const std::string& id, const std::string& fqn, bool grad,
    const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<SessionRecord>> found =
      FindSession(id, principal);
  if (!found.ok()) return found.status();
  absl::StatusOr<int> index = FindTensor(**found, fqn, grad);
  if (!index.ok()) return index.status();
  return (*found)->gather->layout.tensors[*index];
}

absl::StatusOr<core::SessionTensor> SessionManager::CheckWriteTarget(
    const std::string& id, const std::string& fqn, bool grad, core::DType dtype,
    int64_t offset, int64_t count, const std::string& principal,
    const std::optional<core::Shape>& shape) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<SessionRecord>> found =
      FindOpenSession(id, principal);
  if (!found.ok()) return found.status();
  SessionRecord& session = **found;
  absl::StatusOr<int> index = FindTensor(session, fqn, grad);
  if (!index.ok()) return index.status();
  const core::SessionTensor& info = session.gather->layout.tensors[*index];
  const core::FlatParamEntry& param = session.model->spec.Param(info.location);
  core::TensorWrite write{fqn, dtype, shape, offset, count};
  if (absl::Status status = core::CheckWrite(id, &param, write); !status.ok()) {
    return status;
  }
  return info;
}

absl::StatusOr<core::SessionTensor> SessionManager::Write(
    const std::string& id, const std::string& fqn, bool grad, core::DType dtype,
    int64_t offset, absl::string_view bytes, const std::string& principal,
    const std::optional<core::Shape>& shape) {
  const int64_t element_size = static_cast<int64_t>(core::ElementSize(dtype));
  if (static_cast<int64_t>(bytes.size()) % element_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("write of ", bytes.size(), " bytes is not a whole number ",
                     "of ", core::DTypeName(dtype), " elements"));
  }
  const int64_t count = static_cast<int64_t>(bytes.size()) / element_size;
  absl::StatusOr<core::SessionTensor> info =
      CheckWriteTarget(id, fqn, grad, dtype, offset, count, principal, shape);
  if (!info.ok()) return info.status();

  WriteOp op;
  op.session_id = id;
  op.grad = grad;
  op.element_offset = offset;
  op.element_size = element_size;
  op.bytes = std::string(bytes);
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SessionRecord>> found =
        FindSession(id, principal);
    if (!found.ok()) return found.status();
    SessionRecord& session = **found;
    op.gather_id = session.gather->id;
    op.tensor = session.gather->layout.Find(info->fqn);
    op.private_copy = !session.writable();
    session.written = true;
    if (op.private_copy &&
        session.private_tensors.count({op.tensor, grad}) == 0) {
      // The copy a first edit makes, on every node holding one, counts
      // against the budget (R9).
      const std::vector<int64_t>& placed = session.gather->bytes_per_node;
      for (size_t node = 0; node < memory_per_node_.size(); ++node) {
        if (placed[node] == 0) continue;
        if (absl::Status status = core::CheckMemoryBudget(
                static_cast<int>(node), options_.memory_budget_bytes,
                memory_per_node_[node], info->bytes());
            !status.ok()) {
          return status;
        }
      }
      for (size_t node = 0; node < memory_per_node_.size(); ++node) {
        if (placed[node] == 0) continue;
        memory_per_node_[node] += info->bytes();
        session.private_bytes_per_node[node] += info->bytes();
      }
      session.private_tensors.insert({op.tensor, grad});
    }
  }
  if (absl::Status status = ops_->Write(op); !status.ok()) return status;
  return info;
}

absl::StatusOr<SessionManager::SharedCopy> SessionManager::ShareCopy(
    const std::string& id, bool grad, bool host_only,
    const std::string& principal) {
  std::shared_ptr<SessionRecord> session;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SessionRecord>> found =
        FindOpenSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    // Device copies go out as CUDA IPC handles, for writable sessions too
    // (edits on each GPU are written back into the ranks on that GPU).
    const ShardStore* store = session->model->store.get();
    const bool device_copy = !session->options.offload_to_cpu &&
                             store != nullptr && store->on_device();
    if (session->writable() && !device_copy) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session ", id,
          " is writable: only a read-only session's host copy can be "
          "mapped; read it with ReadTensor"));
    }
    if (device_copy && host_only) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session ", id,
          "'s copy is in device memory, which a host mapping cannot reach; "
          "read it with ReadTensor, open the session with offload_to_cpu, "
          "or map its CUDA IPC handles (MapSession without host_copy_only)"));
    }
    if (device_copy) session->gather->mapped_on_device = true;
    // CUDA IPC handles cannot be made read-only: a writable session's
    // device copy handed out counts as written (R22).
    if (device_copy && session->writable()) session->written = true;
    if (!session->private_tensors.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session ", id,
          " has edits of its own, which a mapping of the gathered copy "
          "would not show; read it with ReadTensor"));
    }
    if (grad && !session->gather->has_grads) {
      return absl::NotFoundError(
          absl::StrCat("session ", id, " has no gradients"));
    }
  }
  absl::StatusOr<LocalCopyShare> share =
      ops_->ShareLocalCopy(session->gather->id, grad);
  if (!share.ok()) return share.status();
  SharedCopy shared;
  shared.share = *std::move(share);
  shared.bytes = session->gather->layout.total_bytes;
  shared.tensors = session->gather->layout.tensors;
  return shared;
}

bool SessionManager::IsOpen(const std::string& id,
                            const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<SessionRecord>> found =
      FindSession(id, principal);
  return found.ok() && (*found)->state == core::SessionState::kOpen;
}

absl::StatusOr<
    std::vector<std::pair<core::SessionTensor, core::TensorStatistics>>>
SessionManager::Stats(const std::string& id,
                      const std::vector<std::string>& fqns, bool grad, int bins,
                      const std::string& principal) {
  std::shared_ptr<SessionRecord> session;
  std::vector<int> tensors;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SessionRecord>> found =
        FindOpenSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    if (fqns.empty()) {
      if (grad && !session->gather->has_grads) {
        return FindTensor(*session, "", true).status();
      }
      for (size_t i = 0; i < session->gather->layout.tensors.size(); ++i) {
        tensors.push_back(static_cast<int>(i));
      }
    }
    for (const std::string& fqn : fqns) {
      absl::StatusOr<int> index = FindTensor(*session, fqn, grad);
      if (!index.ok()) return index.status();
      tensors.push_back(*index);
    }
  }
  absl::StatusOr<std::vector<core::TensorStatistics>> stats =
      ops_->Stats(session->gather->id, session->id, tensors, grad, bins);
  if (!stats.ok()) return stats.status();
  std::vector<std::pair<core::SessionTensor, core::TensorStatistics>> result;
  for (size_t i = 0; i < tensors.size(); ++i) {
    result.emplace_back(session->gather->layout.tensors[tensors[i]],
                        (*stats)[i]);
  }
  return result;
}

}  // namespace summon::server
