// SessionManager::Open: a session's options checked, its scope resolved,
// the rules against training and other sessions (R1-R4, docs/rules.md#r1),
// the per-principal limit, a read-only session joining an identical shared
// gather (R2), the memory budget on every node holding a copy (R9), and the
// GatherOp every node runs in the leader's sequence.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/session_rules.h"
#include "core/session_state.h"
#include "server/session/session_id.h"
#include "server/session/session_internal.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {

namespace {

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

// The options' own limits (docs/design.md#session-options): a home rank in
// the world, a lease in (0, max_lease], a floating-point read_dtype.
absl::Status CheckSessionOptions(const core::ModelSpec& spec,
                                 const SessionOptions& options,
                                 absl::Duration max_lease) {
  const int world = spec.groups.topology.world_size();
  if (options.home_rank < 0 || options.home_rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("home rank ", options.home_rank,
                     " is outside the world of ", world,
                     " ranks (--home-rank R, home_rank)"));
  }
  if (options.lease <= absl::ZeroDuration() || options.lease > max_lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease must be in (0, ", absl::FormatDuration(max_lease),
                     "] (--lease SECONDS, lease_seconds), got ",
                     absl::FormatDuration(options.lease)));
  }
  if (options.read_dtype.has_value() &&
      !core::IsFloatingPoint(*options.read_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the read dtype must be a floating-point dtype "
                     "(--read-dtype D, read_dtype), got ",
                     core::DTypeName(*options.read_dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

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

  auto session = std::make_shared<SessionRecord>();
  session->id = NewSessionId(ops_->Epoch());
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

  std::shared_ptr<GatherRecord> shared;
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
      for (const std::weak_ptr<GatherRecord>& weak : shareable_gathers_) {
        std::shared_ptr<GatherRecord> candidate = weak.lock();
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
      auto gather = std::make_shared<GatherRecord>();
      gather->id = session->id;
      gather->identity = identity;
      gather->layout = core::LayoutSessionBuffer(spec, *scope);
      if (options.with_grads) {
        for (int rank : request.ranks) {
          gather->has_grads = gather->has_grads || model->grads_by_rank[rank];
        }
      }
      core::NodeSets nodes;
      nodes.absent = ops_->AbsentNodes();
      absl::StatusOr<core::GatherPlan> plan =
          core::PlanGather(spec, gather->layout,
                           options.rank0_only ? core::Placement::kHomeRank
                                              : core::Placement::kPerNode,
                           options.home_rank, nodes);
      if (absl::IsUnavailable(plan.status())) {
        // A cluster formed on its survivors without a holder of some shard.
        return absl::UnavailableError(absl::StrCat(
            "model '", model_name, "' is unavailable: ",
            plan.status().message(),
            "; it serves again once that node is back"));
      }
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
      op = GatherOp{/*sequence=*/0,
                    gather->id,
                    model_name,
                    options.scope,
                    options.rank0_only,
                    options.home_rank,
                    gather->has_grads,
                    /*read_only=*/!options.writeback,
                    options.offload_to_cpu,
                    /*stale_nodes=*/{}};
      Number(op);
      gather->epoch = op.epoch;
    }
    ++model->open_sessions;
    opened_epoch_tags_.insert(*SessionIdEpochTag(session->id));
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
    if (sessions_.count(session->id) == 0) {
      // Aborted while it gathered (AbortAll): its copies went with the
      // epoch, whatever the gather answered. A failed gather names the node.
      if (!gathered.ok()) return gathered;
      return absl::UnavailableError(absl::StrCat(
          "session ", session->id,
          " was aborted while it gathered (the cluster lost a node or its "
          "leader and re-forms); open it again"));
    }
    if (!gathered.ok()) {
      Finish(*session, core::SessionState::kFailed,
             absl::StrCat("gather failed (", gathered.message(), ")"));
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

}  // namespace summon::server
