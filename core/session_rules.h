#ifndef SUMMON_CORE_SESSION_RULES_H_
#define SUMMON_CORE_SESSION_RULES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/layout.h"
#include "core/model_spec.h"

namespace summon::core {

// Rules R1-R14 of docs/rules.md, each a pure function over explicit state so
// that the leader, every node and the tests agree on one implementation.
// R10 lives in DeriveShardGroups (model_spec.h) and R14 in CheckFlattenable
// (dtype.h); unknown parameters and units (R11) in ModelSpec::FindParam and
// ModelSpec::FindUnit.

// A rank's training phase as its trainer reports it.
enum class TrainingPhase {
  kIdle,
  kForward,
  kBetween,  // Forward done, backward not started.
  kBackward,
  kOptimizer,
};

// "IDLE", "FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER"; parsing ignores case
// (`summonctl trainer phase M 0 forward`).
absl::StatusOr<TrainingPhase> ParseTrainingPhase(absl::string_view name);
absl::string_view TrainingPhaseName(TrainingPhase phase);
// FORWARD, BACKWARD and OPTIMIZER: a training step is running on the rank.
bool IsInTrainingStep(TrainingPhase phase);

// One unit as the leader's session table sees it.
struct UnitRuntimeState {
  std::string fqn;  // For messages.
  // Moves whenever the unit's shards change (optimizer step, writeback,
  // checkpoint load).
  uint64_t generation = 0;
  // The one writable session holding the unit (R2), from open to close.
  std::optional<std::string> writable_session;
  // Read-only sessions whose gather is still running. A read-only session
  // that finished gathering holds a snapshot and constrains nothing (R6), so
  // it is not listed here.
  std::set<std::string> read_only_gathering;
};

// One model's training and session state.
struct ModelRuntimeState {
  std::string model;
  std::vector<TrainingPhase> phase_per_rank;  // By global rank.
  std::vector<UnitRuntimeState> units;        // Indexed as ModelSpec::units.
};

// An open resolved against the model: which units it gathers, which ranks
// hold slices of them, and whether it writes back.
struct OpenRequest {
  std::vector<int> units;  // Indices into ModelRuntimeState::units.
  std::vector<int> ranks;  // Global ranks.
  bool writable = true;    // writeback=true.
};

// Out-of-range unit or rank indices are INVALID_ARGUMENT in every rule below.

// R1: FAILED_PRECONDITION while any rank of the request is in FORWARD,
// BACKWARD or OPTIMIZER (FSDP's S1), naming the rank and its phase.
absl::Status CheckNoTrainingInProgress(const ModelRuntimeState& model,
                                       const OpenRequest& open);

// R2: FAILED_PRECONDITION for a writable open when another writable session
// holds one of its units (FSDP's S2, nested recursive sessions included),
// naming the unit and the holder. Read-only opens pass: they never conflict
// with each other, and one may open while a writable session holds the unit
// because it gathers a snapshot of the shards as they are, not of the
// writable session's edits (R6); writeback then moves the generation (R7).
absl::Status CheckUnitLocks(const ModelRuntimeState& model,
                            const OpenRequest& open);

// R4: FAILED_PRECONDITION for a writable open while a rank of the request is
// BETWEEN forward and backward under a strategy that keeps the unsharded
// parameters across that gap (FSDP's P2: backward would use the pre-write
// values). `effective` is ShardGroups::effective, so a group of size 1 (R10)
// is not refused.
absl::Status CheckWritableAllowedInPhase(const ModelRuntimeState& model,
                                         Strategy effective,
                                         const OpenRequest& open);

// R1, R4 and R2 in that order: everything an open needs from the model's
// state before memory (R9) is considered.
absl::Status CheckOpen(const ModelRuntimeState& model, Strategy effective,
                       const OpenRequest& open);

// What one gather holds. Read-only opens with equal identities share one
// buffer (R2); read_dtype is absent because it converts on read.
struct GatherIdentity {
  std::string model;
  std::set<std::string> params;                 // Scoped primary FQNs.
  std::map<int, uint64_t> generation_per_unit;  // Scoped units, at gather.
  bool with_grads = false;
  bool rank0_only = false;
  int home_rank = 0;  // Only meaningful with rank0_only.
  bool offload_to_cpu = false;
  bool writable = false;
};

// True when `requested` may take a reference on the `existing` buffer: both
// read-only (a writable session's buffer holds its private edits), the same
// parameters of the same model, gathered at the same generation of every
// unit, with the same physical placement.
bool CanShareGather(const GatherIdentity& existing,
                    const GatherIdentity& requested);

// R3 and R6: what to do with a trainer's report that `rank` enters `to`.
// kWait: a session blocks the move and the trainer gave a deadline that has
// not passed; decide again when a session releases a unit or at the deadline.
enum class PhaseChangeDecision {
  kAllow,
  kWait,
};

// A move out of IDLE or BETWEEN into a training step is blocked while a
// writable session holds a unit of the model or a read-only session is still
// gathering one. Blocked without a deadline: FAILED_PRECONDITION; blocked at
// or after the deadline: DEADLINE_EXCEEDED. Both name the unit and session.
// `now` is injected so that callers and tests own the clock.
absl::StatusOr<PhaseChangeDecision> DecidePhaseChange(
    const ModelRuntimeState& model, int rank, TrainingPhase to,
    std::optional<absl::Time> deadline, absl::Time now);

// A client's write into one logical tensor of a session: `count` elements of
// `dtype` from row-major element `offset`. `shape` is the shape the client
// declared, when it sent one (a whole-tensor write from a .npy file).
struct TensorWrite {
  std::string fqn;
  DType dtype = DType::kFloat32;
  std::optional<Shape> shape;
  int64_t offset = 0;
  int64_t count = 0;
};

// R5 (FSDP's P1): `target` is the parameter the session resolved `write.fqn`
// to, or null when the session has no such parameter (NOT_FOUND). A dtype or
// shape other than the stored one is INVALID_ARGUMENT; an element range not
// inside [0, numel) is OUT_OF_RANGE. A write that declares a shape is a
// whole-tensor write: anything but all numel elements from 0 is
// INVALID_ARGUMENT.
absl::Status CheckWrite(absl::string_view session, const FlatParamEntry* target,
                        const TensorWrite& write);

// R7: ABORTED naming the unit and both generations when a unit's generation
// moved since the session gathered it, unless `force`.
absl::Status CheckGenerationsUnchanged(
    const ModelRuntimeState& model, absl::string_view session,
    const std::map<int, uint64_t>& gathered_generation_per_unit, bool force);

// R8: the two-phase writeback's decision. `prepare_per_node[n]` is node n's
// PREPARE answer, nullopt when it did not answer. OK means every node
// commits; any other status means no node does. UNAVAILABLE when a node is
// unreachable (no answer, UNAVAILABLE or DEADLINE_EXCEEDED): that outranks a
// refusal because the node's failure aborts the session anyway (R13).
// Otherwise ABORTED when a node refused. The message names every such node.
absl::Status DecideCommit(
    absl::string_view session,
    const std::vector<std::optional<absl::Status>>& prepare_per_node);

// R9: RESOURCE_EXHAUSTED naming the node when `requested_bytes` more would
// exceed its unshard memory budget. A budget of 0 means unlimited (the
// default of `summond --memory-budget`). Checked for every node before any
// allocation.
absl::Status CheckMemoryBudget(int node, int64_t budget_bytes,
                               int64_t in_use_bytes, int64_t requested_bytes);

// R11: NOT_FOUND for a model or session the caller named.
absl::Status UnknownModelError(absl::string_view model);
absl::Status UnknownSessionError(absl::string_view session);

// R12: PERMISSION_DENIED naming the principal and the session unless the
// principal owns it or is an admin.
absl::Status CheckSessionAccess(absl::string_view session,
                                absl::string_view owner,
                                absl::string_view principal, bool is_admin);

// The nodes a session has state on: its gather plan, copies and home.
struct SessionFootprint {
  std::string session;
  std::set<int> nodes;
};

struct NodeFailureAborts {
  std::vector<std::string> sessions;  // In the order given.
  absl::Status status;                // UNAVAILABLE naming the failed node.
};

// R13: the sessions that a failure of `failed_node` aborts everywhere (no
// writeback; shards stay as before) and the status their clients get.
NodeFailureAborts SessionsAbortedByNodeFailure(
    const std::vector<SessionFootprint>& sessions, int failed_node);

// Leases: a session whose lease deadline has been reached is aborted.
bool LeaseExpired(absl::Time deadline, absl::Time now);
absl::Time RenewLease(absl::Time now, absl::Duration lease);

}  // namespace summon::core

#endif  // SUMMON_CORE_SESSION_RULES_H_
