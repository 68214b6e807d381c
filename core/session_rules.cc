#include "core/session_rules.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::core {
namespace {

constexpr struct {
  TrainingPhase phase;
  absl::string_view name;
} kPhaseNames[] = {
    {TrainingPhase::kIdle, "IDLE"},
    {TrainingPhase::kForward, "FORWARD"},
    {TrainingPhase::kBetween, "BETWEEN"},
    {TrainingPhase::kBackward, "BACKWARD"},
    {TrainingPhase::kOptimizer, "OPTIMIZER"},
};

absl::Status CheckRank(const ModelRuntimeState& model, int rank) {
  if (rank >= 0 && rank < static_cast<int>(model.phase_per_rank.size())) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model '", model.model, "' has no rank ", rank,
                   " (world size ", model.phase_per_rank.size(), ")"));
}

absl::Status CheckUnit(const ModelRuntimeState& model, int unit) {
  if (unit >= 0 && unit < static_cast<int>(model.units.size())) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model '", model.model, "' has no unit #", unit, " (",
                   model.units.size(), " units)"));
}

// What stops every rank of `model` from starting a training step (R3, R6), as
// "unit 'U' is held by writable session S" / "... gathered by read-only
// session S"; empty when nothing does.
std::string TrainingBlocker(const ModelRuntimeState& model) {
  for (const UnitRuntimeState& unit : model.units) {
    if (unit.writable_session.has_value()) {
      return absl::StrCat("unit '", unit.fqn, "' is held by writable session ",
                          *unit.writable_session);
    }
    if (!unit.read_only_gathering.empty()) {
      return absl::StrCat("unit '", unit.fqn,
                          "' is being gathered by read-only session ",
                          *unit.read_only_gathering.begin());
    }
  }
  return "";
}

bool IsUnreachable(const std::optional<absl::Status>& answer) {
  return !answer.has_value() ||
         answer->code() == absl::StatusCode::kUnavailable ||
         answer->code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::StatusOr<TrainingPhase> ParseTrainingPhase(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  for (const auto& entry : kPhaseNames) {
    if (entry.name == upper) return entry.phase;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown training phase '", name,
      "' (expected IDLE, FORWARD, BETWEEN, BACKWARD or OPTIMIZER)"));
}

absl::string_view TrainingPhaseName(TrainingPhase phase) {
  for (const auto& entry : kPhaseNames) {
    if (entry.phase == phase) return entry.name;
  }
  return "UNKNOWN";  // Unreachable: every enumerator is listed above.
}

bool IsInTrainingStep(TrainingPhase phase) {
  return phase == TrainingPhase::kForward ||
         phase == TrainingPhase::kBackward ||
         phase == TrainingPhase::kOptimizer;
}

absl::Status CheckNoTrainingInProgress(const ModelRuntimeState& model,
                                       const OpenRequest& open) {
  for (int rank : open.ranks) {
    if (absl::Status status = CheckRank(model, rank); !status.ok()) {
      return status;
    }
    const TrainingPhase phase = model.phase_per_rank[rank];
    if (IsInTrainingStep(phase)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot open a session on model '", model.model, "': rank ", rank,
          " is in ", TrainingPhaseName(phase),
          "; sessions open only while every rank is IDLE or BETWEEN"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckUnitLocks(const ModelRuntimeState& model,
                            const OpenRequest& open) {
  for (int index : open.units) {
    if (absl::Status status = CheckUnit(model, index); !status.ok()) {
      return status;
    }
    const UnitRuntimeState& unit = model.units[index];
    if (open.writable && unit.writable_session.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot open a writable session on model '", model.model, "': unit '",
          unit.fqn, "' is already in writable session ",
          *unit.writable_session));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWritableAllowedInPhase(const ModelRuntimeState& model,
                                         Strategy effective,
                                         const OpenRequest& open) {
  if (!open.writable || !KeepsUnshardedBetweenForwardAndBackward(effective)) {
    return absl::OkStatus();
  }
  for (int rank : open.ranks) {
    if (absl::Status status = CheckRank(model, rank); !status.ok()) {
      return status;
    }
    if (model.phase_per_rank[rank] == TrainingPhase::kBetween) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot open a writable session on model '", model.model, "': rank ",
          rank, " is BETWEEN forward and backward and ",
          StrategyName(effective),
          " keeps the unsharded parameters until backward; open with "
          "writeback=false or wait for backward to finish"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOpen(const ModelRuntimeState& model, Strategy effective,
                       const OpenRequest& open) {
  if (absl::Status status = CheckNoTrainingInProgress(model, open);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckWritableAllowedInPhase(model, effective, open);
      !status.ok()) {
    return status;
  }
  return CheckUnitLocks(model, open);
}

bool CanShareGather(const GatherIdentity& existing,
                    const GatherIdentity& requested) {
  if (existing.writable || requested.writable) return false;
  if (existing.rank0_only != requested.rank0_only) return false;
  if (existing.rank0_only && existing.home_rank != requested.home_rank) {
    return false;
  }
  return existing.model == requested.model &&
         existing.params == requested.params &&
         existing.generation_per_unit == requested.generation_per_unit &&
         existing.with_grads == requested.with_grads &&
         existing.offload_to_cpu == requested.offload_to_cpu;
}

absl::StatusOr<PhaseChangeDecision> DecidePhaseChange(
    const ModelRuntimeState& model, int rank, TrainingPhase to,
    std::optional<absl::Time> deadline, absl::Time now) {
  if (absl::Status status = CheckRank(model, rank); !status.ok()) {
    return status;
  }
  const TrainingPhase from = model.phase_per_rank[rank];
  if (IsInTrainingStep(from) || !IsInTrainingStep(to)) {
    return PhaseChangeDecision::kAllow;
  }
  const std::string blocker = TrainingBlocker(model);
  if (blocker.empty()) return PhaseChangeDecision::kAllow;
  const std::string refusal = absl::StrCat(
      "rank ", rank, " of model '", model.model, "' cannot move from ",
      TrainingPhaseName(from), " to ", TrainingPhaseName(to), ": ", blocker);
  if (!deadline.has_value()) return absl::FailedPreconditionError(refusal);
  if (now >= *deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        refusal, " (trainer deadline ",
        absl::FormatTime(*deadline, absl::UTCTimeZone()), " passed)"));
  }
  return PhaseChangeDecision::kWait;
}

absl::Status CheckWrite(absl::string_view session, const FlatParamEntry* target,
                        const TensorWrite& write) {
  if (target == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "session ", session, " has no parameter '", write.fqn, "'"));
  }
  const std::string where =
      absl::StrCat("write to '", write.fqn, "' in session ", session, ": ");
  if (write.dtype != target->dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "dtype ", DTypeName(write.dtype),
                     " differs from the stored ", DTypeName(target->dtype)));
  }
  if (write.shape.has_value() && *write.shape != target->shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "shape ", ShapeToString(*write.shape), " differs from ",
        ShapeToString(target->shape), "; shapes never change"));
  }
  // Written so that offset + count cannot overflow.
  if (write.offset < 0 || write.count < 0 || write.offset > target->numel ||
      write.count > target->numel - write.offset) {
    return absl::OutOfRangeError(
        absl::StrCat(where, "elements [", write.offset, ", +", write.count,
                     ") are not inside [0, ", target->numel, ")"));
  }
  // A whole-tensor write (one that declares a shape) covers every element:
  // no short write, no write from elsewhere than element 0.
  if (write.shape.has_value() &&
      (write.offset != 0 || write.count != target->numel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "a whole-tensor write of shape ", ShapeToString(*write.shape),
        " carries ", write.count, " elements from element ", write.offset,
        ", not all ", target->numel, " of ", ShapeToString(target->shape),
        " from 0; write a range without a shape"));
  }
  return absl::OkStatus();
}

absl::Status CheckGenerationsUnchanged(
    const ModelRuntimeState& model, absl::string_view session,
    const std::map<int, uint64_t>& gathered_generation_per_unit, bool force) {
  for (const auto& [index, gathered] : gathered_generation_per_unit) {
    if (absl::Status status = CheckUnit(model, index); !status.ok()) {
      return status;
    }
    const UnitRuntimeState& unit = model.units[index];
    if (!force && unit.generation != gathered) {
      return absl::AbortedError(absl::StrCat(
          "writeback of session ", session, " refused: unit '", unit.fqn,
          "' of model '", model.model, "' moved from generation ", gathered,
          " to ", unit.generation,
          " since the gather; close with force to overwrite"));
    }
  }
  return absl::OkStatus();
}

absl::Status DecideCommit(
    absl::string_view session,
    const std::vector<std::optional<absl::Status>>& prepare_per_node) {
  std::vector<std::string> unreachable;
  std::vector<std::string> refused;
  for (size_t node = 0; node < prepare_per_node.size(); ++node) {
    const std::optional<absl::Status>& answer = prepare_per_node[node];
    if (IsUnreachable(answer)) {
      unreachable.push_back(absl::StrCat(
          "node ", node, answer.has_value() ? ": " : " did not answer",
          answer.has_value() ? answer->ToString() : ""));
    } else if (!answer->ok()) {
      refused.push_back(absl::StrCat("node ", node, ": ", answer->ToString()));
    }
  }
  if (!unreachable.empty()) {
    return absl::UnavailableError(
        absl::StrCat("writeback of session ", session,
                     " aborted on every node, shards unchanged: ",
                     absl::StrJoin(unreachable, "; ")));
  }
  if (!refused.empty()) {
    return absl::AbortedError(
        absl::StrCat("writeback of session ", session,
                     " aborted on every node, shards unchanged: ",
                     absl::StrJoin(refused, "; ")));
  }
  return absl::OkStatus();
}

absl::Status CheckMemoryBudget(int node, int64_t budget_bytes,
                               int64_t in_use_bytes, int64_t requested_bytes) {
  if (budget_bytes == 0) return absl::OkStatus();
  // Written so that in_use + requested cannot overflow.
  if (in_use_bytes <= budget_bytes &&
      requested_bytes <= budget_bytes - in_use_bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("node ", node, " needs ", requested_bytes,
                   " bytes of unshard memory but has ",
                   budget_bytes - in_use_bytes, " of its ", budget_bytes,
                   "-byte budget free (", in_use_bytes, " in use)"));
}

absl::Status UnknownModelError(absl::string_view model) {
  return absl::NotFoundError(absl::StrCat("no model named '", model, "'"));
}

absl::Status UnknownSessionError(absl::string_view session) {
  return absl::NotFoundError(absl::StrCat("no session ", session));
}

absl::Status CheckSessionAccess(absl::string_view session,
                                absl::string_view owner,
                                absl::string_view principal, bool is_admin) {
  if (is_admin || principal == owner) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("principal '", principal, "' may not operate session ",
                   session, " (owned by '", owner, "')"));
}

NodeFailureAborts SessionsAbortedByNodeFailure(
    const std::vector<SessionFootprint>& sessions, int failed_node) {
  NodeFailureAborts aborts;
  for (const SessionFootprint& footprint : sessions) {
    if (footprint.nodes.count(failed_node) > 0) {
      aborts.sessions.push_back(footprint.session);
    }
  }
  aborts.status = absl::UnavailableError(
      absl::StrCat("node ", failed_node,
                   " failed; sessions touching it were aborted on every node "
                   "and shards left as they were"));
  return aborts;
}

bool LeaseExpired(absl::Time deadline, absl::Time now) {
  return now >= deadline;
}

absl::Time RenewLease(absl::Time now, absl::Duration lease) {
  return now + lease;
}

}  // namespace summon::core
