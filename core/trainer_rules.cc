#include "core/trainer_rules.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::core {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

absl::Status CheckPhaseMove(absl::string_view model, int rank,
                            TrainingPhase from, TrainingPhase to) {
  using P = TrainingPhase;
  bool legal = false;
  switch (from) {
    case P::kIdle:
      legal = to == P::kForward || to == P::kIdle;
      break;
    case P::kForward:
      legal = to == P::kBetween || to == P::kIdle;
      break;
    case P::kBetween:
      legal = to == P::kBackward;
      break;
    case P::kBackward:
      legal = to == P::kOptimizer || to == P::kIdle;
      break;
    case P::kOptimizer:
      legal = to == P::kIdle;
      break;
  }
  if (legal) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", rank, " of model '", model, "' cannot move from ",
      TrainingPhaseName(from), " to ", TrainingPhaseName(to),
      "; phases move IDLE -> FORWARD -> BETWEEN -> BACKWARD -> OPTIMIZER -> "
      "IDLE (or FORWARD -> IDLE, BACKWARD -> IDLE)"));
}

bool CountOptimizerStep(TrainingPhase from, TrainingPhase to, int64_t step_key,
                        std::optional<int64_t>& last_counted) {
  if (to != TrainingPhase::kOptimizer || from == TrainingPhase::kOptimizer) {
    return false;
  }
  if (last_counted.has_value() && step_key <= *last_counted) return false;
  last_counted = step_key;
  return true;
}

bool LeaseLapsed(const TrainerLease& lease, absl::Time now) {
  return now >= lease.expires;
}

absl::StatusOr<AttachDecision> DecideAttach(
    absl::string_view model, int world_size, const std::vector<int>& ranks,
    absl::string_view incarnation,
    const std::vector<const TrainerLease*>& holders, absl::Time now) {
  if (incarnation.empty()) {
    return absl::InvalidArgumentError(
        "attach needs an incarnation naming the trainer process");
  }
  if (ranks.empty()) {
    return absl::InvalidArgumentError("attach needs at least one rank");
  }
  std::set<int> seen;
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is outside the world of ", world_size,
                       " ranks of model '", model, "'"));
    }
    if (!seen.insert(rank).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is listed twice"));
    }
  }
  std::vector<int> sorted(seen.begin(), seen.end());
  AttachDecision decision;
  for (const TrainerLease* holder : holders) {
    if (holder->incarnation == incarnation) {
      if (holder->ranks != sorted) {
        return absl::FailedPreconditionError(absl::StrCat(
            "trainer '", incarnation, "' already holds ranks ",
            RankList(holder->ranks), " of model '", model, "' (lease ",
            holder->id, "); detach before attaching ranks ", RankList(sorted)));
      }
      decision.resumed_lease = holder->id;
      continue;
    }
    if (!LeaseLapsed(*holder, now)) {
      const std::vector<int>& held = holder->ranks;
      int rank = held.front();
      for (int candidate : held) {
        if (seen.count(candidate) > 0) {
          rank = candidate;
          break;
        }
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "rank ", rank, " of model '", model, "' is held by live trainer '",
          holder->incarnation, "' (lease ", holder->id, "), which lapses in ",
          absl::FormatDuration(
              absl::Ceil(holder->expires - now, absl::Milliseconds(1))),
          " without a heartbeat"));
    }
    decision.taken_over_leases.push_back(holder->id);
    decision.previous_incarnation = holder->incarnation;
  }
  return decision;
}

absl::Status CheckReportLease(absl::string_view model, int rank,
                              const TrainerLease* holder,
                              absl::string_view lease_id) {
  if (holder == nullptr) {
    if (lease_id.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease_id, " does not hold rank ", rank, " of model '", model,
        "' (no trainer is attached to it; it lapsed, detached or was "
        "revoked): attach again"));
  }
  if (holder->id == lease_id) return absl::OkStatus();
  if (lease_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " of model '", model, "' is attached by trainer '",
        holder->incarnation, "'; report with its lease"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("lease ", lease_id, " does not hold rank ", rank,
                   " of model '", model, "'; trainer '", holder->incarnation,
                   "' holds it (lease ", holder->id, ")"));
}

absl::Status CheckShardWrite(const ModelRuntimeState& model,
                             absl::string_view what) {
  for (size_t rank = 0; rank < model.phase_per_rank.size(); ++rank) {
    const TrainingPhase phase = model.phase_per_rank[rank];
    if (IsInTrainingStep(phase)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the ", what, " of model '", model.model, "': rank ", rank,
          " is in ", TrainingPhaseName(phase),
          "; shards are written only while every rank is IDLE or BETWEEN"));
    }
  }
  for (const UnitRuntimeState& unit : model.units) {
    if (unit.writable_session.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the ", what, " of model '", model.model, "': unit '",
          unit.fqn, "' is held by ", *unit.writable_session));
    }
    if (!unit.read_only_gathering.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing the ", what, " of model '", model.model,
                       "': unit '", unit.fqn, "' is being gathered by session ",
                       *unit.read_only_gathering.begin()));
    }
  }
  return absl::OkStatus();
}

bool IsExternalWrite(ShardWriter writer) {
  return writer != ShardWriter::kOwnTrainer;
}

}  // namespace summon::core
