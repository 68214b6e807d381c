// SessionManager: its lifecycle (construction with the single-node default
// NodeOps, the lease reaper), finding and describing sessions, renewing
// their leases, finishing them (locks, gathers and memory released) and
// aborting them all after a node failed (R13). Open is in session_open.cc,
// Close in session_writeback.cc.

#include "server/session/session_manager.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/runtime/node_runtime.h"
#include "server/session/local_node_ops.h"
#include "server/session/session_id.h"
#include "server/session/session_internal.h"
#include "spdlog/spdlog.h"

namespace summon::server {

SessionManager::SessionManager(ModelRegistry* registry, Options options)
    : registry_(registry),
      options_(std::move(options)),
      local_runtime_(
          options_.node_ops != nullptr
              ? nullptr
              : std::make_unique<NodeRuntime>(
                    registry_->options().node, registry_, &local_communicator_,
                    options_.collective_timeout, options_.copy_pool)),
      local_ops_(local_runtime_
                     ? std::make_unique<LocalNodeOps>(local_runtime_.get())
                     : nullptr),
      ops_(options_.node_ops != nullptr ? options_.node_ops
                                        : local_ops_.get()) {
  memory_per_node_.assign(registry_->options().topology.nodes, 0);
  reaper_ = std::thread([this] { ReaperLoop(); });
}

SessionManager::~SessionManager() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reaper_.join();
}

void SessionManager::ReaperLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.reaper_interval);
    if (stopping_) break;
    mu_.Unlock();
    ReapExpired();
    if (options_.coordinator != nullptr) {
      ClearDecisions();
      ResolveUndecided();
    }
    mu_.Lock();
  }
}

absl::StatusOr<std::shared_ptr<SessionRecord>> SessionManager::FindSession(
    const std::string& id, const std::string& principal) {
  const bool is_admin =
      std::find(options_.admins.begin(), options_.admins.end(), principal) !=
          options_.admins.end() ||
      (options_.is_admin && options_.is_admin(principal));
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    // R25: an ended session says why and when, for a while.
    auto ended = tombstones_.find(id);
    if (ended == tombstones_.end() ||
        options_.clock() - ended->second.ended > options_.tombstone_ttl) {
      if (absl::Status lost = LeaderLost(id); !lost.ok()) return lost;
      return core::UnknownSessionError(id);
    }
    if (absl::Status status = core::CheckSessionAccess(id, ended->second.owner,
                                                       principal, is_admin);
        !status.ok()) {
      return status;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id, " ended at ",
                     absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", ended->second.ended,
                                      absl::UTCTimeZone()),
                     ": ", ended->second.reason));
  }
  if (absl::Status status =
          core::CheckSessionAccess(id, it->second->owner, principal, is_admin);
      !status.ok()) {
    return status;
  }
  return it->second;
}

absl::Status SessionManager::LeaderLost(const std::string& id) const {
  const uint64_t epoch = ops_->Epoch();
  const std::optional<uint32_t> tag = SessionIdEpochTag(id);
  // A single node (epoch 0) has no earlier leader; tag 0 names no cluster
  // epoch (etcd's and the static epochs start at 1).
  if (epoch == 0 || !tag.has_value() || *tag == 0 ||
      opened_epoch_tags_.count(*tag) > 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "session ", id, " ended: leader lost (it was opened in cluster epoch ",
      absl::Hex(*tag),
      " by an earlier leader, and sessions live in their "
      "leader's memory; the cluster is in epoch ",
      absl::Hex(epoch), " now: open it again)"));
}

uint64_t SessionManager::SequenceEpoch() {
  const uint64_t epoch = ops_->Epoch();
  if (epoch != sequence_epoch_) {
    sequence_epoch_ = epoch;
    next_sequence_ = 1;
  }
  return epoch;
}

SessionInfo SessionManager::Describe(const SessionRecord& session) const {
  SessionInfo info;
  info.id = session.id;
  info.model = session.model->name;
  info.owner = session.owner;
  info.options = session.options;
  info.state = session.state;
  for (const auto& [unit, generation] :
       session.gather->identity.generation_per_unit) {
    info.gathered_generations[session.model->spec.units[unit].fqn] = generation;
  }
  info.params = session.gather->layout.tensors;
  info.has_grads = session.gather->has_grads;
  info.created = session.created;
  info.expires = session.lease_deadline;
  // Physical bytes over every memory domain holding a copy.
  info.bytes = 0;
  for (int64_t bytes : session.gather->bytes_per_node) info.bytes += bytes;
  info.shared_gather = session.gather->holders > 1;
  info.network_bytes = session.gather->network_bytes;
  info.warnings = session.scope.warnings;
  return info;
}

absl::StatusOr<SessionInfo> SessionManager::Get(const std::string& id,
                                                const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<SessionRecord>> session =
      FindSession(id, principal);
  if (!session.ok()) return session.status();
  return Describe(**session);
}

SessionManager::Usage SessionManager::CurrentUsage() const {
  absl::MutexLock lock(&mu_);
  Usage usage;
  for (const auto& [id, session] : sessions_) {
    ++(session->options.writeback ? usage.writable_sessions
                                  : usage.readonly_sessions);
  }
  usage.memory_per_node = memory_per_node_;
  return usage;
}

std::vector<SessionInfo> SessionManager::List(const std::string& model,
                                              const std::string& principal,
                                              bool all) {
  absl::MutexLock lock(&mu_);
  std::vector<SessionInfo> result;
  for (const auto& [id, session] : sessions_) {
    if (!model.empty() && session->model->name != model) continue;
    if (!all && !FindSession(id, principal).ok()) continue;
    result.push_back(Describe(*session));
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const SessionInfo& a, const SessionInfo& b) {
                     return a.created < b.created;
                   });
  return result;
}

absl::StatusOr<SessionInfo> SessionManager::Renew(
    const std::string& id, std::optional<absl::Duration> lease,
    const std::string& principal) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<SessionRecord>> found =
      FindSession(id, principal);
  if (!found.ok()) return found.status();
  SessionRecord& session = **found;
  if (session.state != core::SessionState::kOpen) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id, " is ",
                     core::SessionStateName(session.state), ", not OPEN"));
  }
  if (lease.has_value()) {
    if (*lease <= absl::ZeroDuration() || *lease > options_.max_lease) {
      return absl::InvalidArgumentError(
          absl::StrCat("lease must be in (0, ",
                       absl::FormatDuration(options_.max_lease),
                       "] (--lease SECONDS, lease_seconds), got ",
                       absl::FormatDuration(*lease)));
    }
    session.options.lease = *lease;
  }
  session.lease_deadline =
      core::RenewLease(options_.clock(), session.options.lease);
  return Describe(session);
}

void SessionManager::Finish(SessionRecord& session,
                            core::SessionState final_state,
                            const std::string& reason) {
  // Once: a session ended meanwhile (AbortAll on a failure while its gather
  // or writeback was in flight) is not ended again when that call returns,
  // which would count its model's sessions and its gather's holders twice.
  auto live = sessions_.find(session.id);
  if (live == sessions_.end() || live->second.get() != &session) return;
  ModelEntry& model = *session.model;
  {
    absl::MutexLock runtime_lock(&model.runtime_mu);
    for (int unit : session.scope.units) {
      core::UnitRuntimeState& state = model.runtime.units[unit];
      if (state.writable_session == session.id) state.writable_session.reset();
      state.read_only_gathering.erase(session.id);
    }
    --model.open_sessions;
  }
  GatherRecord& gather = *session.gather;
  for (size_t node = 0; node < memory_per_node_.size(); ++node) {
    memory_per_node_[node] -= session.private_bytes_per_node[node];
    if (gather.holders == 1) {
      memory_per_node_[node] -= gather.bytes_per_node[node];
    }
  }
  if (!session.private_tensors.empty()) ops_->ReleaseSession(session.id);
  if (--gather.holders == 0) {
    ops_->Release(gather.id);
    shareable_gathers_.erase(
        std::remove_if(shareable_gathers_.begin(), shareable_gathers_.end(),
                       [&](const std::weak_ptr<GatherRecord>& weak) {
                         std::shared_ptr<GatherRecord> other = weak.lock();
                         return !other || other == session.gather;
                       }),
        shareable_gathers_.end());
  }
  session.state = final_state;
  sessions_.erase(session.id);
  // R25: the tombstone, within the bound (the oldest go first, and any
  // past their time).
  const absl::Time now = options_.clock();
  if (options_.tombstone_capacity > 0) {
    if (tombstones_.count(session.id) == 0) {
      tombstone_order_.push_back(session.id);
    }
    tombstones_[session.id] = Tombstone{session.owner, reason, now};
    while (!tombstone_order_.empty() &&
           (static_cast<int>(tombstone_order_.size()) >
                options_.tombstone_capacity ||
            now - tombstones_[tombstone_order_.front()].ended >
                options_.tombstone_ttl)) {
      tombstones_.erase(tombstone_order_.front());
      tombstone_order_.pop_front();
    }
  }
  released_.SignalAll();
}

int SessionManager::AbortAll(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  // Left to the next formation, which reads every record.
  undecided_.clear();
  std::vector<std::shared_ptr<SessionRecord>> all;
  for (const auto& [id, session] : sessions_) all.push_back(session);
  for (const std::shared_ptr<SessionRecord>& session : all) {
    Finish(*session, core::SessionState::kFailed, "aborted by node failure");
    spdlog::warn("session abort id={} principal={} model={} reason={}",
                 session->id, session->owner, session->model->name,
                 reason.ToString());
  }
  return static_cast<int>(all.size());
}

int SessionManager::ReapExpired() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock();
  std::vector<std::shared_ptr<SessionRecord>> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->state == core::SessionState::kOpen &&
        core::LeaseExpired(session->lease_deadline, now)) {
      expired.push_back(session);
    }
  }
  for (const std::shared_ptr<SessionRecord>& session : expired) {
    Finish(*session, core::SessionState::kFailed,
           absl::StrCat("lease expired (lease ",
                        absl::ToDoubleSeconds(session->options.lease), " s)"));
    spdlog::warn(
        "session abort id={} principal={} model={} scope={} bytes={} "
        "reason=lease expired",
        session->id, session->owner, session->model->name,
        ScopeText(session->options.scope), session->gather->bytes);
  }
  return static_cast<int>(expired.size());
}

int64_t SessionManager::MemoryInUse(int node) const {
  absl::MutexLock lock(&mu_);
  return memory_per_node_[node];
}

int SessionManager::OpenSessionCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace summon::server
