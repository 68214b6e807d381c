// The training-phase interlock on the session manager's side: trainers'
// phase moves (R3, R16, one generation per optimizer step), the other
// generation moves of the trainer contract (init external, a step cut short
// by a lapsed lease), each set on every node, and shard writes outside
// sessions taking the model like a writable session (R15).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/trainer_rules.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {

namespace {

// A rank left OPTIMIZER and now every rank has been through OPTIMIZER as
// often as every other and none is in it: the step's shards are final on
// every rank. Its step key (CountOptimizerStep's), or nullopt.
std::optional<int64_t> StepDoneBy(const ModelEntry& model,
                                  core::TrainingPhase previous,
                                  core::TrainingPhase phase)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(model.runtime_mu) {
  if (previous != core::TrainingPhase::kOptimizer ||
      phase == core::TrainingPhase::kOptimizer) {
    return std::nullopt;
  }
  for (size_t rank = 0; rank < model.runtime.phase_per_rank.size(); ++rank) {
    if (model.runtime.phase_per_rank[rank] == core::TrainingPhase::kOptimizer ||
        model.optimizer_entries[rank] != model.optimizer_entries[0]) {
      return std::nullopt;
    }
  }
  return model.last_optimizer_step;
}

}  // namespace

absl::StatusOr<PhaseReport> SessionManager::ReportPhase(
    const std::string& model_name, int rank, core::TrainingPhase phase,
    std::optional<int64_t> step, std::optional<absl::Time> deadline,
    bool reassert) {
  return ReportPhaseAndPublish(model_name, rank, phase, step, deadline,
                               reassert, std::nullopt, nullptr);
}

absl::StatusOr<PhaseReport> SessionManager::ReportPhaseAndPublish(
    const std::string& model_name, int rank, core::TrainingPhase phase,
    std::optional<int64_t> step, std::optional<absl::Time> deadline,
    bool reassert, std::optional<int64_t> publish_step,
    std::optional<ShardWriteGuard>* publish_hold) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(model_name);
  if (!found.ok()) return found.status();
  ModelEntry& model = **found;
  const absl::Time started = options_.clock();
  PhaseReport report;
  // An optimizer step's generations, set on every node (R7, R23) after the
  // manager's lock is released and before the trainer hears back.
  std::optional<GenerationsOp> step_generations;
  // Set when this move ends a step on every rank (the watches' cue).
  std::optional<int64_t> step_done;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      absl::StatusOr<core::PhaseChangeDecision> decision;
      {
        absl::MutexLock runtime_lock(&model.runtime_mu);
        if (reassert && rank >= 0 &&
            rank < static_cast<int>(model.runtime.phase_per_rank.size()) &&
            model.runtime.phase_per_rank[rank] == phase) {
          // Already there: the trainer says so again; nothing moves.
          report.previous = phase;
          report.phase = phase;
          if (step.has_value()) model.steps[rank] = step;
          report.step = model.steps[rank];
          break;
        }
        decision = core::DecidePhaseChange(model.runtime, rank, phase, deadline,
                                           options_.clock());
        // DecidePhaseChange checked the rank; the machine (R16) comes first
        // so that an illegal move is never made to wait.
        if (decision.ok() || !absl::IsInvalidArgument(decision.status())) {
          if (absl::Status legal = core::CheckPhaseMove(
                  model_name, rank, model.runtime.phase_per_rank[rank], phase);
              !legal.ok()) {
            return legal;
          }
        }
        if (decision.ok() && publish_step.has_value() &&
            (phase != core::TrainingPhase::kIdle ||
             model.runtime.phase_per_rank[rank] !=
                 core::TrainingPhase::kOptimizer)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "rank ", rank, " of model '", model_name,
              "': publish_step goes with the move out of OPTIMIZER into "
              "IDLE that ends a step, not with ",
              core::TrainingPhaseName(model.runtime.phase_per_rank[rank]),
              " -> ", core::TrainingPhaseName(phase)));
        }
        if (decision.ok() && *decision == core::PhaseChangeDecision::kAllow) {
          report.previous = model.runtime.phase_per_rank[rank];
          report.phase = phase;
          model.runtime.phase_per_rank[rank] = phase;
          if (step.has_value()) model.steps[rank] = step;
          report.step = model.steps[rank];
          if (phase == core::TrainingPhase::kOptimizer &&
              report.previous != core::TrainingPhase::kOptimizer) {
            ++model.optimizer_entries[rank];
          }
          // The step's key: its number when the trainer reports one, else
          // how often this rank entered OPTIMIZER. The first rank to enter
          // OPTIMIZER for a step moves every unit's generation (R7 relies on
          // it) on every node; its external-write counter stays (the
          // trainer's own write, R18).
          const int64_t step_key = model.steps[rank].has_value()
                                       ? *model.steps[rank]
                                       : model.optimizer_entries[rank];
          if (core::CountOptimizerStep(report.previous, phase, step_key,
                                       model.last_optimizer_step)) {
            step_generations = NextGenerations(model);
          }
          step_done = StepDoneBy(model, report.previous, phase);
          if (publish_step.has_value()) {
            model.publish_asked[rank] = publish_step;
          }
          if (step_done.has_value()) {
            DecidePublishLocked(*found, report, publish_hold);
          }
          break;
        }
      }
      if (!decision.ok()) return decision.status();
      // kWait: a session will release the unit or the deadline passes.
      released_.WaitWithDeadline(&mu_, *deadline);
    }
  }
  if (step_generations.has_value()) {
    // A node that missed it is logged, not the trainer's failure: the step
    // goes on, and that node errs on the safe side of R7. A node that does
    // not answer at once holds this report step_generations_wait at most,
    // once while it is silent: one node's silence never holds another
    // node's step (R24).
    SendGenerations(*step_generations,
                    absl::StrCat("optimizer step (rank ", rank, ")"),
                    options_.step_generations_wait)
        .IgnoreError();
  }
  if (step_done.has_value() && options_.on_step_done) {
    options_.on_step_done(model_name, *step_done, options_.clock());
  }
  report.waited = options_.clock() - started;
  return report;
}

GenerationsOp SessionManager::NextGenerations(ModelEntry& model) {
  GenerationsOp op;
  op.model = model.name;
  for (size_t unit = 0; unit < model.runtime.units.size(); ++unit) {
    op.generations[static_cast<int>(unit)] =
        ++model.runtime.units[unit].generation;
  }
  // In the global order, so that every node sets them at the same point
  // relative to gathers and PREPAREs.
  Number(op);
  return op;
}

absl::Status SessionManager::SendGenerations(const GenerationsOp& op,
                                             const std::string& why,
                                             absl::Duration wait) {
  absl::Status set = ops_->SetGenerations(op, wait);
  if (absl::IsDeadlineExceeded(set)) {
    // Still on its way (NodeOps logs it if it fails there).
    spdlog::warn("{} of model {}: {}", why, op.model,
                 std::string(set.message()));
  } else if (!set.ok()) {
    spdlog::error("{} of model {}: generations not set on every node: {}", why,
                  op.model, set.ToString());
  }
  return set;
}

absl::Status SessionManager::MarkInitialized(const std::string& model_name) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(model_name);
  if (!found.ok()) return found.status();
  ModelEntry& model = **found;
  GenerationsOp op;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock runtime_lock(&model.runtime_mu);
    if (!model.awaiting_init) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model_name,
                       "' is not awaiting init (it was not created with init "
                       "external, or was marked initialised already)"));
    }
    // Cleared here, under the lock, so a second call is refused; every
    // node (this one included) records it when the op reaches it.
    model.awaiting_init = false;
    op = NextGenerations(model);
    op.initialized = true;
  }
  // Unlike a step's, an init's move is the caller's answer: a node that
  // missed it would still list the model AWAITING_INIT.
  return SendGenerations(op, "init external", absl::InfiniteDuration());
}

absl::Status SessionManager::StepCutShort(const std::string& model_name) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Find(model_name);
  if (!found.ok()) return found.status();
  ModelEntry& model = **found;
  GenerationsOp op;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock runtime_lock(&model.runtime_mu);
    if (model.store == nullptr) return absl::OkStatus();  // MISSING_SHARDS.
    op = NextGenerations(model);
  }
  // Like a step's: a lease's end (a re-attach) is not held by a silent node.
  return SendGenerations(op, "optimizer step cut short",
                         options_.step_generations_wait);
}

absl::StatusOr<SessionManager::ShardWriteGuard>
SessionManager::LockForShardWrite(std::shared_ptr<ModelEntry> model,
                                  const std::string& what) {
  absl::MutexLock lock(&mu_);
  absl::MutexLock runtime_lock(&model->runtime_mu);
  if (model->open_sessions > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing the ", what, " of model '", model->name, "': it has ",
        model->open_sessions, " open sessions; close them first"));
  }
  if (absl::Status status = core::CheckShardWrite(model->runtime, what);
      !status.ok()) {
    return status;
  }
  for (core::UnitRuntimeState& unit : model->runtime.units) {
    unit.writable_session = absl::StrCat("(", what, ")");
  }
  return ShardWriteGuard(this, std::move(model));
}

absl::Status SessionManager::SnapshotRefusalLocked(const ModelEntry& model,
                                                   const std::string& what) {
  if (model.awaiting_init) {
    // The trainer writes its first values without a phase move.
    return absl::FailedPreconditionError(
        absl::StrCat("refusing the ", what, " of model '", model.name,
                     "': it is awaiting init (Trainer.MarkInitialized)"));
  }
  const std::vector<core::TrainingPhase>& phases = model.runtime.phase_per_rank;
  for (size_t rank = 0; rank < phases.size(); ++rank) {
    if (phases[rank] == core::TrainingPhase::kOptimizer) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the ", what, " of model '", model.name, "': rank ", rank,
          " is in OPTIMIZER (its shards are changing)"));
    }
    if (model.optimizer_entries[rank] != model.optimizer_entries[0]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the ", what, " of model '", model.name, "': rank ", rank,
          " has been through OPTIMIZER ", model.optimizer_entries[rank],
          " times and rank 0 ", model.optimizer_entries[0],
          " times, so the ranks' shards are of different steps"));
    }
  }
  for (const core::UnitRuntimeState& unit : model.runtime.units) {
    if (unit.writable_session.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the ", what, " of model '", model.name, "': unit '",
          unit.fqn, "' is held by ", *unit.writable_session));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionManager::ShardWriteGuard> SessionManager::LockForSnapshot(
    std::shared_ptr<ModelEntry> model, const std::string& what) {
  absl::MutexLock lock(&mu_);
  absl::MutexLock runtime_lock(&model->runtime_mu);
  if (absl::Status refused = SnapshotRefusalLocked(*model, what);
      !refused.ok()) {
    return refused;
  }
  for (core::UnitRuntimeState& unit : model->runtime.units) {
    unit.writable_session = absl::StrCat("(", what, ")");
  }
  return ShardWriteGuard(this, std::move(model));
}

void SessionManager::DecidePublishLocked(std::shared_ptr<ModelEntry> model,
                                         PhaseReport& report,
                                         std::optional<ShardWriteGuard>* hold) {
  std::vector<std::optional<int64_t>>& asked = model->publish_asked;
  const bool any = std::any_of(asked.begin(), asked.end(),
                               [](const auto& a) { return a.has_value(); });
  if (!any) return;
  // Asks belong to the step that just ended on every rank.
  std::vector<std::optional<int64_t>> asks(asked.size());
  asks.swap(asked);
  for (size_t rank = 0; rank < asks.size(); ++rank) {
    if (asks[rank] != asks[0]) {
      report.publish_refused = absl::FailedPreconditionError(absl::StrCat(
          "not publishing at the end of this step of model '", model->name,
          "': rank 0 asked for ",
          asks[0].has_value() ? absl::StrCat("version ", *asks[0]) : "none",
          " and rank ", rank, " for ",
          asks[rank].has_value() ? absl::StrCat("version ", *asks[rank])
                                 : "none"));
      spdlog::warn("{}", std::string(report.publish_refused.message()));
      return;
    }
  }
  const std::string what = absl::StrCat("publish of version ", *asks[0]);
  if (absl::Status refused = SnapshotRefusalLocked(*model, what);
      !refused.ok() || hold == nullptr) {
    report.publish_refused =
        refused.ok() ? absl::InternalError("no publish hold asked for")
                     : refused;
    return;
  }
  for (core::UnitRuntimeState& unit : model->runtime.units) {
    unit.writable_session = absl::StrCat("(", what, ")");
  }
  hold->emplace(this, std::move(model));
  report.publish = *asks[0];
}

SessionManager::ShardWriteGuard::~ShardWriteGuard() {
  if (manager_ == nullptr) return;
  absl::MutexLock lock(&manager_->mu_);
  {
    absl::MutexLock runtime_lock(&model_->runtime_mu);
    for (core::UnitRuntimeState& unit : model_->runtime.units) {
      unit.writable_session.reset();
    }
  }
  manager_->released_.SignalAll();
}

}  // namespace summon::server
