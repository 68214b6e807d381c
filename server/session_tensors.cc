// SessionManager: tensor access (read, write, stats) on open sessions.

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/session_internal.h"
#include "server/session_manager.h"

namespace summon::server {
namespace {

constexpr int64_t kMinChunkBytes = 4 << 10;
constexpr int64_t kMaxChunkBytes = 4 << 20;
constexpr int64_t kDefaultChunkBytes = 1 << 20;

absl::Status NotOpen(const std::string& id, core::SessionState state) {
  return absl::FailedPreconditionError(absl::StrCat(
      "session ", id, " is ", core::SessionStateName(state), ", not OPEN"));
}

}  // namespace

absl::StatusOr<int> SessionManager::FindTensor(const Session& session,
                                               const std::string& fqn,
                                               bool grad) const {
  const Gather& gather = *session.gather;
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
                                   : " (opened without with_grads)"));
  }
  return index;
}

uint8_t* SessionManager::TensorData(Session& session, int tensor, bool grad,
                                    bool for_write) {
  Gather& gather = *session.gather;
  const core::SessionTensor& info = gather.layout.tensors[tensor];
  auto& privates = grad ? session.private_grads : session.private_params;
  if (auto it = privates.find(tensor); it != privates.end()) {
    return it->second.data();
  }
  uint8_t* shared =
      (grad ? gather.copy.grads.data() : gather.copy.params.data()) +
      info.buffer_offset;
  if (!for_write || session.writable()) return shared;
  // A read-only gather may be shared: edits go to this session's own copy.
  std::vector<uint8_t>& copy = privates[tensor];
  copy.assign(shared, shared + info.bytes());
  return copy.data();
}

absl::Status SessionManager::Read(const std::string& id, const std::string& fqn,
                                  bool grad, std::optional<core::DType> dtype,
                                  int64_t offset, std::optional<int64_t> count,
                                  int64_t chunk_bytes,
                                  const std::string& principal,
                                  const ChunkSink& sink) {
  std::shared_ptr<Session> session;
  int tensor = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    if (session->state != core::SessionState::kOpen) {
      return NotOpen(id, session->state);
    }
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
  const int64_t in_size = static_cast<int64_t>(core::ElementSize(info.dtype));
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(out_dtype));
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / out_size);

  absl::ReaderMutexLock data_lock(&session->data_mu);
  const uint8_t* data = TensorData(*session, tensor, grad, false);
  std::string chunk;
  for (int64_t done = 0; done < total || (total == 0 && done == 0);) {
    const int64_t n = std::min(per_chunk, total - done);
    chunk.resize(static_cast<size_t>(n * out_size));
    if (absl::Status status =
            core::ConvertElements(info.dtype, data + (offset + done) * in_size,
                                  out_dtype, chunk.data(), n);
        !status.ok()) {
      return status;
    }
    if (!sink(offset + done, chunk)) {
      return absl::CancelledError("reader went away");
    }
    if (n == 0) break;
    done += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<core::SessionTensor> SessionManager::DescribeTensor(
    const std::string& id, const std::string& fqn, bool grad,
    const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
  if (!found.ok()) return found.status();
  absl::StatusOr<int> index = FindTensor(**found, fqn, grad);
  if (!index.ok()) return index.status();
  return (*found)->gather->layout.tensors[*index];
}

absl::StatusOr<core::SessionTensor> SessionManager::CheckWriteTarget(
    const std::string& id, const std::string& fqn, bool grad, core::DType dtype,
    int64_t offset, int64_t count, const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
  if (!found.ok()) return found.status();
  Session& session = **found;
  if (session.state != core::SessionState::kOpen) {
    return NotOpen(id, session.state);
  }
  absl::StatusOr<int> index = FindTensor(session, fqn, grad);
  if (!index.ok()) return index.status();
  const core::SessionTensor& info = session.gather->layout.tensors[*index];
  const core::FlatParamEntry& param = session.model->spec.Param(info.location);
  core::TensorWrite write{fqn, dtype, std::nullopt, offset, count};
  if (absl::Status status = core::CheckWrite(id, &param, write); !status.ok()) {
    return status;
  }
  return info;
}

absl::StatusOr<core::SessionTensor> SessionManager::Write(
    const std::string& id, const std::string& fqn, bool grad, core::DType dtype,
    int64_t offset, absl::string_view bytes, const std::string& principal) {
  const int64_t element_size = static_cast<int64_t>(core::ElementSize(dtype));
  if (static_cast<int64_t>(bytes.size()) % element_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("write of ", bytes.size(), " bytes is not a whole number ",
                     "of ", core::DTypeName(dtype), " elements"));
  }
  const int64_t count = static_cast<int64_t>(bytes.size()) / element_size;
  absl::StatusOr<core::SessionTensor> info =
      CheckWriteTarget(id, fqn, grad, dtype, offset, count, principal);
  if (!info.ok()) return info.status();

  std::shared_ptr<Session> session;
  int tensor = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    tensor = session->gather->layout.Find(info->fqn);
    if (!session->writable()) {
      // The private copy a first edit makes counts against the budget (R9).
      absl::MutexLock data_lock(&session->data_mu);
      const auto& privates =
          grad ? session->private_grads : session->private_params;
      if (privates.count(tensor) == 0) {
        if (absl::Status status = core::CheckMemoryBudget(
                registry_->options().node, options_.memory_budget_bytes,
                memory_in_use_, info->bytes());
            !status.ok()) {
          return status;
        }
        memory_in_use_ += info->bytes();
        session->private_bytes += info->bytes();
      }
    }
  }
  absl::MutexLock data_lock(&session->data_mu);
  uint8_t* data = TensorData(*session, tensor, grad, true);
  std::memcpy(data + offset * element_size, bytes.data(), bytes.size());
  return info;
}

absl::StatusOr<std::vector<std::pair<core::SessionTensor, TensorStatistics>>>
SessionManager::Stats(const std::string& id,
                      const std::vector<std::string>& fqns, bool grad, int bins,
                      const std::string& principal) {
  std::shared_ptr<Session> session;
  std::vector<int> tensors;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    if (session->state != core::SessionState::kOpen) {
      return NotOpen(id, session->state);
    }
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
  std::vector<std::pair<core::SessionTensor, TensorStatistics>> result;
  absl::ReaderMutexLock data_lock(&session->data_mu);
  for (int tensor : tensors) {
    const core::SessionTensor& info = session->gather->layout.tensors[tensor];
    absl::StatusOr<TensorStatistics> stats = ComputeTensorStatistics(
        info.dtype, TensorData(*session, tensor, grad, false), info.numel,
        bins);
    if (!stats.ok()) return stats.status();
    result.emplace_back(info, *std::move(stats));
  }
  return result;
}

}  // namespace summon::server
