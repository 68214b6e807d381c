#ifndef SUMMON_CORE_TRAINER_RULES_H_
#define SUMMON_CORE_TRAINER_RULES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/session_rules.h"

namespace summon::core {

// The trainer contract (rules R15-R18 of docs/rules.md) as pure functions: the
// phase machine, trainer leases, the interlock every shard write passes and
// which writes a trainer must hear about. The daemon keeps the state; these
// decide.

// R16: a rank's phase moves only along
//   IDLE -> FORWARD -> BETWEEN -> BACKWARD -> OPTIMIZER -> IDLE
// plus FORWARD -> IDLE (an eval forward), BACKWARD -> IDLE (no optimizer
// step) and IDLE -> IDLE (a trainer announcing itself). Anything else, a
// repeated FORWARD included, is FAILED_PRECONDITION naming both phases.
absl::Status CheckPhaseMove(absl::string_view model, int rank,
                            TrainingPhase from, TrainingPhase to);

// One optimizer step moves a unit's generation once, however many ranks
// report it. `step_key` names the step: the reported step number, or the
// rank's own count of optimizer entries for trainers that report none.
// `last_counted` is the model's last counted step key (nullopt: none yet).
// True when a move from `from` to `to` starts a step not counted yet; then
// `last_counted` becomes `step_key`.
bool CountOptimizerStep(TrainingPhase from, TrainingPhase to, int64_t step_key,
                        std::optional<int64_t>& last_counted);

// A trainer process's hold on some ranks of one model (R17).
struct TrainerLease {
  std::string id;
  std::string model;
  std::string incarnation;
  std::vector<int> ranks;  // Ascending.
  absl::Duration ttl;
  absl::Time expires;
};

bool LeaseLapsed(const TrainerLease& lease, absl::Time now);

// What an Attach does to the leases holding any of its ranks.
struct AttachDecision {
  // The same incarnation already holds exactly these ranks: its lease
  // continues (a reconnect, or a daemon restart).
  std::optional<std::string> resumed_lease;
  // Lapsed leases of other incarnations that the new lease replaces.
  std::vector<std::string> taken_over_leases;
  std::string previous_incarnation;  // Of the last lease taken over.
};

// R17: `holders` are the leases holding any of `ranks` of `model`. A live
// lease of another incarnation on one of them is ALREADY_EXISTS naming the
// rank, the incarnation and when its lease lapses; the same incarnation
// holding other ranks than asked is FAILED_PRECONDITION (detach first).
// INVALID_ARGUMENT for an empty incarnation, no ranks, or a rank outside
// [0, world_size) or repeated.
absl::StatusOr<AttachDecision> DecideAttach(
    absl::string_view model, int world_size, const std::vector<int>& ranks,
    absl::string_view incarnation,
    const std::vector<const TrainerLease*>& holders, absl::Time now);

// R17: a phase report (or any trainer call naming a rank) for `rank` must
// carry the lease holding it, and only that one. `holder` is the lease
// holding the rank (null: none); `lease_id` what the call carried (empty:
// none). FAILED_PRECONDITION otherwise, saying which lease to use.
absl::Status CheckReportLease(absl::string_view model, int rank,
                              const TrainerLease* holder,
                              absl::string_view lease_id);

// R15: every shard write (a checkpoint load, a delete, a re-init) passes the
// interlock of a writable session: FAILED_PRECONDITION naming the rank and
// phase while any rank is in FORWARD, BACKWARD or OPTIMIZER, or naming the
// unit and holder while a session holds or is gathering a unit. `what` says
// which write ("load of a checkpoint").
absl::Status CheckShardWrite(const ModelRuntimeState& model,
                             absl::string_view what);

// R18: who changed a unit's shard. Everything but the unit's own trainer
// moves the unit's external-write counter.
enum class ShardWriter {
  kOwnTrainer,  // An optimizer step, or the trainer's own init.
  kWriteback,   // A session's writeback.
  kLoad,        // A checkpoint load.
};
bool IsExternalWrite(ShardWriter writer);

}  // namespace summon::core

#endif  // SUMMON_CORE_TRAINER_RULES_H_
