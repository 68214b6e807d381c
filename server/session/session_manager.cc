#include "server/session/session_manager.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/session/session_internal.h"
#include "spdlog/spdlog.h"

namespace summon::server {

namespace {

std::string NewSessionId() {
  static std::mt19937_64 generator{std::random_device{}()};
  static absl::Mutex generator_mu;
  absl::MutexLock lock(&generator_mu);
  return absl::StrFormat("s-%016x", generator());
}

std::string ScopeText(const core::ScopeRequest& scope) {
  if (!scope.params.empty()) {
    return absl::StrCat("params(", scope.params.size(), ")");
  }
  return absl::StrCat("'", scope.module_fqn, "'",
                      scope.recurse ? "" : " no-recurse");
}

// Global ranks that hold a slice of any scoped parameter.
std::vector<int> RanksOfScope(const core::ModelSpec& spec,
                              const core::Scope& scope) {
  std::vector<int> ranks;
  for (int rank = 0; rank < spec.groups.topology.world_size(); ++rank) {
    const int position = spec.groups.PositionOf(rank);
    for (const core::ScopedParam& param : scope.params) {
      if (spec.units[param.location.unit]
              .layout.SliceOf(param.location.param, position)
              .in_shard) {
        ranks.push_back(rank);
        break;
      }
    }
  }
  return ranks;
}

absl::Status CheckSessionOptions(const core::ModelSpec& spec,
                                 const SessionOptions& options,
                                 absl::Duration max_lease) {
  const int world = spec.groups.topology.world_size();
  if (options.home_rank < 0 || options.home_rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("home_rank ", options.home_rank,
                     " is outside the world of ", world, " ranks"));
  }
  if (options.lease <= absl::ZeroDuration() || options.lease > max_lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease must be in (0, ", absl::FormatDuration(max_lease),
                     "], got ", absl::FormatDuration(options.lease)));
  }
  if (options.read_dtype.has_value() &&
      !core::IsFloatingPoint(*options.read_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("read_dtype must be a floating-point dtype, got ",
                     core::DTypeName(*options.read_dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

SessionManager::SessionManager(ModelRegistry* registry, Options options)
    : registry_(registry),
      options_(std::move(options)),
      local_runtime_(
          options_.node_ops != nullptr
              ? nullptr
              : std::make_unique<NodeRuntime>(registry_->options().node,
                                              registry_, &local_communicator_,
                                              options_.collective_timeout)),
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
    mu_.Lock();
  }
}

absl::StatusOr<SessionInfo> SessionManager::Open(const std::string& model_name,
                                                 const SessionOptions& options,
                                                 const std::string& principal) {
  const absl::Time started = options_.clock();
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(model_name);
  if (!found.ok()) return found.status();
  std::shared_ptr<ModelEntry> model = *std::move(found);
  {
    absl::MutexLock runtime_lock(&model->runtime_mu);
    if (model->awaiting_init) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", model_name,
          "' is AWAITING_INIT: its trainer fills the shards (init external) "
          "and calls Trainer.MarkInitialized before sessions open"));
    }
  }
  const core::ModelSpec& spec = model->spec;
  if (absl::Status status =
          CheckSessionOptions(spec, options, options_.max_lease);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<core::Scope> scope = core::ResolveScope(spec, options.scope);
  if (!scope.ok()) return scope.status();

  auto session = std::make_shared<Session>();
  session->id = NewSessionId();
  session->owner = principal;
  session->model = model;
  session->options = options;
  session->scope = *scope;
  session->created = started;
  session->private_bytes_per_node.assign(memory_per_node_.size(), 0);

  core::GatherIdentity identity;
  identity.model = model_name;
  for (const core::ScopedParam& param : scope->params) {
    identity.params.insert(param.fqn);
  }
  identity.with_grads = options.with_grads;
  identity.rank0_only = options.rank0_only;
  identity.home_rank = options.home_rank;
  identity.offload_to_cpu = options.offload_to_cpu;
  identity.writable = options.writeback;

  std::shared_ptr<Gather> shared;
  GatherOp op;
  {
    absl::MutexLock lock(&mu_);
    if (options_.max_sessions_per_principal > 0) {
      int held = 0;
      for (const auto& [id, other] : sessions_)
        held += other->owner == principal;
      if (held >= options_.max_sessions_per_principal) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "principal '", principal, "' already holds ", held,
            " sessions, the most allowed (--max-sessions-per-principal)"));
      }
    }
    absl::MutexLock runtime_lock(&model->runtime_mu);
    core::OpenRequest request{scope->units, RanksOfScope(spec, *scope),
                              options.writeback};
    if (absl::Status status =
            core::CheckOpen(model->runtime, spec.groups.effective, request);
        !status.ok()) {
      return status;
    }
    for (int unit : scope->units) {
      identity.generation_per_unit[unit] =
          model->runtime.units[unit].generation;
    }
    if (!options.writeback) {
      for (const std::weak_ptr<Gather>& weak : shareable_gathers_) {
        std::shared_ptr<Gather> candidate = weak.lock();
        if (candidate && candidate->holders > 0 &&
            !candidate->mapped_on_device &&
            core::CanShareGather(candidate->identity, identity)) {
          shared = candidate;
          break;
        }
      }
    }
    if (shared) {
      ++shared->holders;
      session->gather = shared;
      session->state = core::SessionState::kOpen;
      session->lease_deadline = core::RenewLease(started, options.lease);
    } else {
      auto gather = std::make_shared<Gather>();
      gather->id = session->id;
      gather->identity = identity;
      gather->layout = core::LayoutSessionBuffer(spec, *scope);
      if (options.with_grads) {
        for (int rank : request.ranks) {
          gather->has_grads = gather->has_grads || model->grads_by_rank[rank];
        }
      }
      absl::StatusOr<core::GatherPlan> plan =
          core::PlanGather(spec, gather->layout,
                           options.rank0_only ? core::Placement::kHomeRank
                                              : core::Placement::kPerNode,
                           options.home_rank);
      if (!plan.ok()) return plan.status();
      // R9 on every node holding a copy, before anything is allocated.
      gather->bytes = gather->layout.total_bytes * (gather->has_grads ? 2 : 1);
      gather->bytes_per_node =
          core::CopyBytesPerNode(spec, gather->layout, *plan);
      gather->network_bytes =
          core::GatherNetworkBytes(spec, *plan) * (gather->has_grads ? 2 : 1);
      for (int64_t& bytes : gather->bytes_per_node) {
        if (gather->has_grads) bytes *= 2;
      }
      for (size_t node = 0; node < memory_per_node_.size(); ++node) {
        if (gather->bytes_per_node[node] == 0) continue;
        if (absl::Status status = core::CheckMemoryBudget(
                static_cast<int>(node), options_.memory_budget_bytes,
                memory_per_node_[node], gather->bytes_per_node[node]);
            !status.ok()) {
          return status;
        }
      }
      for (size_t node = 0; node < memory_per_node_.size(); ++node) {
        memory_per_node_[node] += gather->bytes_per_node[node];
      }
      gather->holders = 1;
      session->gather = gather;
      for (int unit : scope->units) {
        if (options.writeback) {
          model->runtime.units[unit].writable_session = session->id;
        } else {
          model->runtime.units[unit].read_only_gathering.insert(session->id);
        }
      }
      gather->epoch = ops_->Epoch();
      op = GatherOp{next_sequence_++,
                    gather->id,
                    model_name,
                    options.scope,
                    options.rank0_only,
                    options.home_rank,
                    gather->has_grads,
                    /*read_only=*/!options.writeback,
                    options.offload_to_cpu};
    }
    ++model->open_sessions;
    sessions_[session->id] = session;
  }

  if (!shared) {
    const absl::Status gathered = ops_->Gather(op);
    absl::MutexLock lock(&mu_);
    {
      absl::MutexLock runtime_lock(&model->runtime_mu);
      for (int unit : scope->units) {
        model->runtime.units[unit].read_only_gathering.erase(session->id);
      }
    }
    if (!gathered.ok()) {
      Finish(*session, core::SessionState::kFailed);
      return gathered;
    }
    session->state = core::SessionState::kOpen;
    session->lease_deadline = core::RenewLease(options_.clock(), options.lease);
    if (!options.writeback) shareable_gathers_.push_back(session->gather);
    released_.SignalAll();
  }

  absl::MutexLock lock(&mu_);
  spdlog::info(
      "session open id={} principal={} model={} scope={} writeback={} "
      "shared={} bytes={} duration_ms={}",
      session->id, principal, model_name, ScopeText(options.scope),
      options.writeback, shared != nullptr, session->gather->bytes,
      absl::ToInt64Milliseconds(options_.clock() - started));
  return Describe(*session);
}

absl::StatusOr<std::shared_ptr<SessionManager::Session>>
SessionManager::FindSession(const std::string& id,
                            const std::string& principal) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return core::UnknownSessionError(id);
  const bool is_admin =
      std::find(options_.admins.begin(), options_.admins.end(), principal) !=
          options_.admins.end() ||
      (options_.is_admin && options_.is_admin(principal));
  if (absl::Status status =
          core::CheckSessionAccess(id, it->second->owner, principal, is_admin);
      !status.ok()) {
    return status;
  }
  return it->second;
}

SessionInfo SessionManager::Describe(const Session& session) const {
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
  absl::StatusOr<std::shared_ptr<Session>> session = FindSession(id, principal);
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
                                              const std::string& principal) {
  absl::MutexLock lock(&mu_);
  std::vector<SessionInfo> result;
  for (const auto& [id, session] : sessions_) {
    if (!model.empty() && session->model->name != model) continue;
    if (!FindSession(id, principal).ok()) continue;
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
  absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
  if (!found.ok()) return found.status();
  Session& session = **found;
  if (session.state != core::SessionState::kOpen) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id, " is ",
                     core::SessionStateName(session.state), ", not OPEN"));
  }
  if (lease.has_value()) {
    if (*lease <= absl::ZeroDuration() || *lease > options_.max_lease) {
      return absl::InvalidArgumentError(
          absl::StrCat("lease must be in (0, ",
                       absl::FormatDuration(options_.max_lease), "]"));
    }
    session.options.lease = *lease;
  }
  session.lease_deadline =
      core::RenewLease(options_.clock(), session.options.lease);
  return Describe(session);
}

absl::StatusOr<CloseResult> SessionManager::Close(
    const std::string& id, bool abort, bool force, const std::string& principal,
    const std::function<bool()>& cancelled) {
  const absl::Time started = options_.clock();
  std::shared_ptr<Session> session;
  PrepareOp prepare;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<Session>> found = FindSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    if (absl::Status status =
            core::CheckTransition(session->state, core::SessionState::kClosing);
        !status.ok()) {
      return status;
    }
    if (abort || !session->writable()) {
      Finish(*session, core::SessionState::kClosed);
      spdlog::info("session {} id={} principal={} model={} scope={} bytes={}",
                   abort ? "abort" : "close", id, principal,
                   session->model->name, ScopeText(session->options.scope),
                   session->gather->bytes);
      return CloseResult{};
    }
    absl::MutexLock runtime_lock(&session->model->runtime_mu);
    if (absl::Status status = core::CheckGenerationsUnchanged(
            session->model->runtime, id,
            session->gather->identity.generation_per_unit, force);
        !status.ok()) {
      return status;
    }
    session->state = core::SessionState::kClosing;
    prepare.gather_id = session->gather->id;
    prepare.session_id = id;
    prepare.expected_generations =
        session->gather->identity.generation_per_unit;
    for (int unit : session->scope.units) {
      prepare.target_generations[unit] =
          session->model->runtime.units[unit].generation + 1;
    }
    prepare.force = force;
  }

  // Two phases: nothing reaches a shard unless every node staged (R8).
  // Writebacks of one model run one at a time (a rank stages one session).
  absl::MutexLock writeback_lock(&session->model->writeback_mu);
  if (cancelled()) {
    absl::MutexLock lock(&mu_);
    session->state = core::SessionState::kOpen;
    return absl::CancelledError(absl::StrCat(
        "the close of session ", id,
        " was cancelled before its writeback began; the session is still "
        "open"));
  }
  {
    absl::MutexLock lock(&mu_);
    prepare.sequence = next_sequence_++;
  }
  absl::StatusOr<int64_t> staged = ops_->Prepare(prepare);
  if (staged.ok()) {
    // A node may have failed (and the session been aborted) while PREPARE
    // ran; a node resumed from a stop may even have voted from a dead epoch.
    // Only a session still closing in the epoch it was gathered in commits.
    absl::MutexLock lock(&mu_);
    if (sessions_.count(id) == 0 ||
        session->state != core::SessionState::kClosing ||
        ops_->Epoch() != session->gather->epoch) {
      staged = absl::UnavailableError(
          absl::StrCat("the cluster changed while session ", id,
                       " was being written back; nothing was committed"));
    }
  }
  if (!staged.ok()) {
    ops_->Abort(id);
    absl::MutexLock lock(&mu_);
    session->state = core::SessionState::kOpen;
    spdlog::warn("session writeback refused id={} model={}: {}", id,
                 session->model->name, staged.status().ToString());
    return staged.status();
  }
  CommitOp commit{0, session->model->name, prepare.gather_id, id,
                  prepare.target_generations};
  // Every node staged: the decision is COMMIT, recorded before any node
  // applies it, so that it completes even if a node (or the leader) fails
  // now.
  RecordDecision(commit);
  {
    absl::MutexLock lock(&mu_);
    commit.sequence = next_sequence_++;
    pending_commits_[id] = commit;
  }
  if (absl::Status status = ops_->Commit(commit); !status.ok()) {
    // Staged data stays in shared memory; the commit completes on every
    // node when the cluster re-forms.
    spdlog::error("session commit incomplete id={} model={}: {}", id,
                  session->model->name, status.ToString());
    absl::MutexLock lock(&mu_);
    Finish(*session, core::SessionState::kFailed);
    return absl::UnavailableError(
        absl::StrCat("the writeback of session ", id,
                     " was decided but did not reach "
                     "every node (",
                     status.message(),
                     "); it completes on every rank when "
                     "the cluster re-forms"));
  }
  ForgetDecision(id);
  {
    absl::MutexLock lock(&mu_);
    pending_commits_.erase(id);
  }

  CloseResult result;
  result.written_back = true;
  result.bytes_written = *staged;
  absl::MutexLock lock(&mu_);
  {
    ModelEntry& model = *session->model;
    absl::MutexLock runtime_lock(&model.runtime_mu);
    for (const auto& [unit, generation] : commit.target_generations) {
      model.runtime.units[unit].generation = generation;
      result.generations[model.spec.units[unit].fqn] = generation;
      result.external_writes[model.spec.units[unit].fqn] =
          model.store->ExternalWrites(unit);
    }
  }
  Finish(*session, core::SessionState::kClosed);
  spdlog::info(
      "session writeback id={} principal={} model={} scope={} bytes={} "
      "duration_ms={}",
      id, principal, session->model->name, ScopeText(session->options.scope),
      result.bytes_written,
      absl::ToInt64Milliseconds(options_.clock() - started));
  return result;
}

void SessionManager::Finish(Session& session, core::SessionState final_state) {
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
  Gather& gather = *session.gather;
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
                       [&](const std::weak_ptr<Gather>& weak) {
                         std::shared_ptr<Gather> other = weak.lock();
                         return !other || other == session.gather;
                       }),
        shareable_gathers_.end());
  }
  session.state = final_state;
  sessions_.erase(session.id);
  released_.SignalAll();
}

int SessionManager::AbortAll(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> all;
  for (const auto& [id, session] : sessions_) all.push_back(session);
  for (const std::shared_ptr<Session>& session : all) {
    Finish(*session, core::SessionState::kFailed);
    spdlog::warn("session abort id={} principal={} model={} reason={}",
                 session->id, session->owner, session->model->name,
                 reason.ToString());
  }
  return static_cast<int>(all.size());
}

int SessionManager::ReapExpired() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock();
  std::vector<std::shared_ptr<Session>> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->state == core::SessionState::kOpen &&
        core::LeaseExpired(session->lease_deadline, now)) {
      expired.push_back(session);
    }
  }
  for (const std::shared_ptr<Session>& session : expired) {
    Finish(*session, core::SessionState::kFailed);
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
