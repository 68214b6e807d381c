#ifndef SUMMON_SERVER_SESSION_SESSION_MANAGER_H_
#define SUMMON_SERVER_SESSION_SESSION_MANAGER_H_

// SessionManager: the leader's sessions. Its work is spread over
// session_manager.cc (lifecycle: describe, renew, finish, reap),
// session_open.cc (open: rules R1-R4, shared gathers, the memory budget),
// session_tensors.cc (read, write, stats, MapSession), session_writeback.cc
// (close: the writeback decision, its log and recovery) and
// session_interlock.cc (trainers' phases, shard writes outside sessions).
// Its plain records are in session_types.h.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/session_rules.h"
#include "core/session_state.h"
#include "core/tensor_stats.h"
#include "server/comm/local_communicator.h"
#include "server/coordinator/coordinator.h"
#include "server/model/model_registry.h"
#include "server/runtime/buffer_pool.h"
#include "server/runtime/node_op_types.h"
#include "server/session/node_ops.h"
#include "server/session/session_types.h"

namespace summon::server {

class NodeRuntime;  // The single-node default's runtime (node_runtime.h).
// The manager's records of a session and of a gather (session_internal.h).
struct GatherRecord;
struct SessionRecord;

// Sessions: the rules (R1-R12) checked against the models' runtime state,
// read-only sessions sharing one gather, leases with a reaper, the nodes'
// memory budget and the training-phase interlock. The session manager
// decides; the nodes' runtimes (NodeOps) move the bytes, every collective
// under a sequence number the manager hands out, and every writeback in two
// phases (PREPARE on every node, then COMMIT).
class SessionManager {
 public:
  struct Options {
    int64_t memory_budget_bytes = 0;  // 0: unlimited.
    std::vector<std::string> admins;  // Principals allowed on any session.
    // Also allowed on any session when it says so (the daemon's Authorizer:
    // --admins and principals granted admin). Null: `admins` only.
    std::function<bool(const std::string&)> is_admin;
    absl::Duration reaper_interval = absl::Milliseconds(200);
    absl::Duration max_lease = absl::Hours(24);
    std::function<absl::Time()> clock = absl::Now;
    // Most sessions one principal may hold at once; 0: no limit.
    int max_sessions_per_principal = 64;
    // Moves the bytes. Null: this single node's own runtime.
    NodeOps* node_ops = nullptr;
    // A cluster on etcd: each writeback's commit decision is recorded there
    // (commits/<session>/<attempt>, fenced by the attempt's epoch) before
    // COMMIT is sent, so whichever node leads next completes it. Null: in
    // <data-dir>/commits, for this node's next life.
    Coordinator* coordinator = nullptr;
    // The session copies' memory of that single node's runtime; null: a
    // pool of its own (BufferPool's defaults).
    std::shared_ptr<BufferPool> copy_pool = nullptr;
    absl::Duration collective_timeout = absl::Seconds(30);
    // R25: ended sessions remembered (their reason and time), the most and
    // for how long; later calls on their ids answer FAILED_PRECONDITION.
    int tombstone_capacity = 4096;
    absl::Duration tombstone_ttl = absl::Minutes(10);
    // Every rank of `model` left OPTIMIZER for `step` (issue 21's watches).
    // Called outside the manager's locks; must not block.
    std::function<void(const std::string& model, int64_t step,
                       absl::Time ended)>
        on_step_done;
    // How long a trainer's report that moves an optimizer step's
    // generations (and a step cut short) waits for every node to take them
    // before it answers. A node that has not answered by then gets them in
    // the background, in sequence, and is not waited for again while it is
    // silent: one node's silence holds another node's step at most this
    // long, once per outage, far below a trainer's report_timeout (R24).
    absl::Duration step_generations_wait = absl::Milliseconds(100);
  };

  SessionManager(ModelRegistry* registry, Options options);
  ~SessionManager();  // Stops the reaper; open sessions are dropped.

  absl::StatusOr<SessionInfo> Open(const std::string& model,
                                   const SessionOptions& options,
                                   const std::string& principal);
  absl::StatusOr<SessionInfo> Get(const std::string& id,
                                  const std::string& principal);
  // For metrics: sessions held (any principal) and session copies' bytes
  // reserved per node against the memory budget.
  using Usage = SessionUsage;
  Usage CurrentUsage() const;
  // Sessions of `model` (all models when empty) visible to `principal`,
  // or with `all` every one, whoever holds it (the caller's role was
  // checked: an operator's listing).
  std::vector<SessionInfo> List(const std::string& model,
                                const std::string& principal, bool all);
  absl::StatusOr<SessionInfo> Renew(const std::string& id,
                                    std::optional<absl::Duration> lease,
                                    const std::string& principal);
  // Writes back (writeback sessions, unless `abort`) and frees the session.
  // R7: ABORTED when a scoped unit's generation moved since the gather,
  // unless `force`; the session then stays open so the caller can decide.
  // `cancelled` is asked once the writeback's turn came: a caller that gave
  // up meanwhile (deadline, disconnect) gets CANCELLED and nothing is
  // written, so it never believes a write failed that landed.
  absl::StatusOr<CloseResult> Close(
      const std::string& id, bool abort, bool force,
      const std::string& principal,
      const std::function<bool()>& cancelled = [] { return false; });

  // Streams elements [offset, offset + count) of a tensor, converted to
  // `dtype` when given, in chunks of about `chunk_bytes`.
  absl::Status Read(const std::string& id, const std::string& fqn, bool grad,
                    std::optional<core::DType> dtype, int64_t offset,
                    std::optional<int64_t> count, int64_t chunk_bytes,
                    const std::string& principal, const ChunkSink& sink);
  // R5: `bytes` must be whole elements of the stored dtype inside the
  // tensor; with `shape` (a whole-tensor write) the tensor's exact shape and
  // every element from 0, else INVALID_ARGUMENT naming both shapes. Applied
  // to the session's copy (a shared gather is first copied for this
  // session); marks the session written (R22).
  absl::StatusOr<core::SessionTensor> Write(
      const std::string& id, const std::string& fqn, bool grad,
      core::DType dtype, int64_t offset, absl::string_view bytes,
      const std::string& principal,
      const std::optional<core::Shape>& shape = std::nullopt);
  // The session's tensor `fqn` (a tied alias names its primary).
  absl::StatusOr<core::SessionTensor> DescribeTensor(
      const std::string& id, const std::string& fqn, bool grad,
      const std::string& principal);
  // The tensor a write will target, checked before any data arrives.
  absl::StatusOr<core::SessionTensor> CheckWriteTarget(
      const std::string& id, const std::string& fqn, bool grad,
      core::DType dtype, int64_t offset, int64_t count,
      const std::string& principal,
      const std::optional<core::Shape>& shape = std::nullopt);
  // The same-node path (MapSession): a session's copy held on this node,
  // with its size and tensors: a read-only session's host copy as a
  // read-only descriptor, any session's device copies as CUDA IPC handles
  // (a gather whose device copies went out is not shared with later
  // opens). FAILED_PRECONDITION for a writable session's host copy (it
  // changes and is written back), a session with edits of its own (the copy
  // would not show them), a session not OPEN, or no copy on this node.
  using SharedCopy = SharedSessionCopy;
  // `host_only`: FAILED_PRECONDITION for a device copy.
  absl::StatusOr<SharedCopy> ShareCopy(const std::string& id, bool grad,
                                       bool host_only,
                                       const std::string& principal);
  // Whether `id` is OPEN and `principal` may use it (a grant's validity).
  bool IsOpen(const std::string& id, const std::string& principal);
  // Statistics of the named tensors (all of the session's when empty).
  absl::StatusOr<
      std::vector<std::pair<core::SessionTensor, core::TensorStatistics>>>
  Stats(const std::string& id, const std::vector<std::string>& fqns, bool grad,
        int bins, const std::string& principal);

  // R16: the move must follow the phase machine. R3: a move into
  // FORWARD/BACKWARD/OPTIMIZER waits (up to `deadline`) or is refused while
  // a writable session (or a shard write) holds a unit of the model. The
  // first rank entering OPTIMIZER for a step moves every unit's generation
  // once: the step changed the shards (session_interlock.cc). `reassert`
  // (a trainer re-establishing its phases after summond could not hear it):
  // a move to the phase the rank is in is accepted and changes nothing.
  absl::StatusOr<PhaseReport> ReportPhase(const std::string& model, int rank,
                                          core::TrainingPhase phase,
                                          std::optional<int64_t> step,
                                          std::optional<absl::Time> deadline,
                                          bool reassert = false);

  // Ends init external (Trainer.MarkInitialized): every unit's generation
  // moves and the model becomes openable, on every node before this
  // returns. FAILED_PRECONDITION when the model is not awaiting init.
  absl::Status MarkInitialized(const std::string& model);
  // A lease ended while its rank was in OPTIMIZER (trainer_leases): the
  // step may have changed some shards, so every unit's generation moves on
  // every node and any gather from before is stale (R7).
  absl::Status StepCutShort(const std::string& model);

  // R15: a shard write outside sessions (a checkpoint load, a delete) takes
  // the model like a writable session of every unit: refused while a rank
  // is in a training step or any session is open or gathering; while held,
  // trainers' moves into a step wait or are refused (R3). Released when the
  // guard is destroyed.
  class ShardWriteGuard {
   public:
    ShardWriteGuard(SessionManager* manager, std::shared_ptr<ModelEntry> model)
        : manager_(manager), model_(std::move(model)) {}
    ShardWriteGuard(ShardWriteGuard&& other) noexcept
        : manager_(std::exchange(other.manager_, nullptr)),
          model_(std::move(other.model_)) {}
    ShardWriteGuard(const ShardWriteGuard&) = delete;
    ShardWriteGuard& operator=(const ShardWriteGuard&) = delete;
    ShardWriteGuard& operator=(ShardWriteGuard&&) = delete;
    ~ShardWriteGuard();

   private:
    SessionManager* manager_;
    std::shared_ptr<ModelEntry> model_;
  };
  // `what` names the write in refusals ("load of a checkpoint").
  absl::StatusOr<ShardWriteGuard> LockForShardWrite(
      std::shared_ptr<ModelEntry> model, const std::string& what);
  // A snapshot of the shards as one step left them (weight sync's
  // Publish): OK only while no rank is in OPTIMIZER, every rank has been
  // through OPTIMIZER equally often and no writable session holds a unit
  // (its writeback could land mid-copy); else FAILED_PRECONDITION naming
  // the rank or unit. Until the guard goes, trainers' moves into a step
  // wait or are refused (R3) and no writable session opens (R2); read-only
  // sessions are not affected.
  absl::StatusOr<ShardWriteGuard> LockForSnapshot(
      std::shared_ptr<ModelEntry> model, const std::string& what);
  // ReportPhase with `publish_step` (weight sync: the trainers publish at
  // the end of a step without a call of their own), which goes with a move
  // from OPTIMIZER into IDLE only (INVALID_ARGUMENT otherwise, before
  // anything moves). It is noted for the rank; the move that ends the step
  // on every rank (the last rank leaving OPTIMIZER), every rank having
  // asked for the same step, takes the snapshot hold (LockForSnapshot's
  // checks and effect) in the same hold of the manager's lock, into
  // `*publish_hold`, and sets the report's `publish`: nothing changes the
  // shards between the step's end and the caller's publish (trainers'
  // moves into a step wait, writable sessions do not open) until the hold
  // goes. When the hold cannot be taken, `publish_refused` says why.
  absl::StatusOr<PhaseReport> ReportPhaseAndPublish(
      const std::string& model, int rank, core::TrainingPhase phase,
      std::optional<int64_t> step, std::optional<absl::Time> deadline,
      bool reassert, std::optional<int64_t> publish_step,
      std::optional<ShardWriteGuard>* publish_hold);

  // R13: a node failed. Every session is aborted without writeback (every
  // session of a cluster touches every node); returns how many. Later calls
  // on them answer FAILED_PRECONDITION `... aborted by node failure` (R25),
  // new opens are refused by the cluster gate.
  int AbortAll(const absl::Status& reason);

  // A cluster (re-)formed: collectives start again at sequence 1, and
  // writebacks decided before a failure finish.
  absl::Status OnClusterFormed();
  // R8: finishes every writeback whose COMMIT was decided but did not reach
  // every node (recorded in <data-dir>/commits, so a restarted leader
  // finishes them too), then drops data staged for anything else.
  // UNAVAILABLE when a decided commit still cannot reach every node.
  absl::Status ResolvePendingCommits();
  // The members that came back (NodeOps::ReturningNodes) take every
  // replicated model's shards and generations from a replica that stayed
  // (session_catch_up.cc). UNAVAILABLE when a copy fails: the cluster then
  // does not become READY and tries again when it re-forms.
  absl::Status CatchUpReturningNodes();
  // A new leader takes every unit's generation from the nodes (issue 31):
  // `held_by_node` has each answering node's generations of `model_name`
  // (unit -> generation). Each unit's becomes the highest any node holds
  // (never lower than the leader's own), and nodes that hold less are moved
  // to it (session_generations.cc).
  absl::Status AdoptGenerations(
      const std::string& model_name,
      const std::vector<std::map<int, uint64_t>>& held_by_node);

  // Aborts sessions whose lease passed; returns how many. The reaper thread
  // calls it; tests call it with an injected clock.
  int ReapExpired();

  // Bytes of session copies held on `node` (R9's measure).
  int64_t MemoryInUse(int node = 0) const;
  int OpenSessionCount() const;

 private:
  absl::StatusOr<std::shared_ptr<SessionRecord>> FindSession(
      const std::string& id, const std::string& principal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FindSession, and FAILED_PRECONDITION unless the session is OPEN.
  absl::StatusOr<std::shared_ptr<SessionRecord>> FindOpenSession(
      const std::string& id, const std::string& principal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionInfo Describe(const SessionRecord& session) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION "session ... ended: leader lost (...)" for an
  // unknown `id` that an earlier leader issued (SessionIdEpochTag); OK for
  // any other.
  absl::Status LeaderLost(const std::string& id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases locks, the gather reference and memory; marks the final state
  // and leaves a tombstone saying why (`reason`) and when it ended (R25).
  void Finish(SessionRecord& session, core::SessionState final_state,
              const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int> FindTensor(const SessionRecord& session,
                                 const std::string& fqn, bool grad) const;
  void ReaperLoop();
  // Gives `op` the next number of the global order of collectives and the
  // cluster epoch it was taken in (sent with it, so no node of another
  // epoch runs it). Numbers start at 1 again in each epoch, as the nodes'
  // runtimes do after their reset.
  template <typename Op>
  void Number(Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    op.epoch = SequenceEpoch();
    op.sequence = next_sequence_++;
  }
  // The current epoch; the numbering restarts when it is not the one the
  // last number was taken in.
  uint64_t SequenceEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every unit of `model` to its next generation in the leader's
  // state and numbers the move in the global order; the caller sends it to
  // every node (SendGenerations) after releasing mu_.
  GenerationsOp NextGenerations(ModelEntry& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, model.runtime_mu);
  // Why a snapshot of `model` (a publish) cannot be taken now, or OK:
  // LockForSnapshot's checks.
  static absl::Status SnapshotRefusalLocked(const ModelEntry& model,
                                            const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(model.runtime_mu);
  // The move that ended a step on every rank: when ranks asked to publish
  // (publish_asked, cleared here), every one for the same version, takes
  // the snapshot hold into `*hold` and sets report.publish; else says why
  // not in report.publish_refused (ReportPhaseAndPublish).
  void DecidePublishLocked(std::shared_ptr<ModelEntry> model,
                           PhaseReport& report,
                           std::optional<ShardWriteGuard>* hold)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, model->runtime_mu);
  // Every node sets `op`'s generations; `why` names the move in the log of
  // a node that missed it (that node refuses writebacks of the model, the
  // safe side of R7, until the next move reaches it). `wait`: how long the
  // caller is held for a node that does not answer (NodeOps).
  absl::Status SendGenerations(const GenerationsOp& op, const std::string& why,
                               absl::Duration wait);
  // A COMMIT decision as the decision log holds it. On a coordinator each
  // attempt (each close's PREPARE: a retried close is another attempt) has
  // its own record, commits/<session>/<attempt>, holding either the
  // decision or, once the attempt is found not decided, its abort record
  // (the seal, ConfirmDecision); `attempt` is "<epoch>-<PREPARE's number>",
  // unique across epochs and retries.
  struct Decision {
    CommitOp commit;
    uint64_t epoch = 0;  // Fences the record and its seal alike.
    std::string attempt;
    std::string text;    // The record's bytes (RecordDecision fills it).
    std::string record;  // Under commits/: "<session>/<attempt>" as listed.
  };
  // The decision log of pending commits: the coordinator's records, else
  // the data dir's (a no-op without one). An error (etcd: the epoch was
  // deposed, no quorum) means the decision was not made: nothing commits.
  // A transaction whose answer was lost (this process paused past the
  // call's deadline, etcd slow) may still have been applied, and then a
  // later leader completes it: the record is read back before the decision
  // counts as not made (ConfirmDecision). UNKNOWN when the record could
  // not be read back either (the leader cut off from etcd): made or not,
  // nobody can tell yet, and the caller keeps every node's staged slices
  // for whoever learns it (ResolveUndecided, or the next formation).
  absl::Status RecordDecision(Decision& decision);
  // After a put that got no answer: read back, the decision's bytes there
  // decide it (OK). Found absent, the attempt is sealed first: its abort
  // record is created under the decision's own key and fence, so the
  // lost transaction, were it applied later (a proposal in flight through
  // a change of etcd's leader), finds the key taken and changes nothing.
  // Only a seal that landed (or a fence refused for good) makes "not
  // decided" final (the error `recorded`); the seal finding the decision
  // there (it landed in between) decides it (OK); no answer: UNKNOWN.
  absl::Status ConfirmDecision(const Decision& decision,
                               const absl::Status& recorded);
  absl::Status Seal(const Decision& decision, const absl::Status& recorded);
  // The decision's record goes once every node applied the COMMIT. On a
  // coordinator the reaper deletes it (ClearDecisions), off the close's
  // path: the decision stays the writeback's one etcd transaction, and a
  // record left a while longer is only completed again by a later leader,
  // which changes nothing. While a node is away (survivors serving), the
  // record stays: the node applies it when it is back (its staged slices
  // wait for it), or its ranks would miss a writeback the others hold.
  void ForgetDecision(const Decision& decision);
  void ClearDecisions();
  // Deletes abort records of earlier epochs (RecordedDecisions lists
  // them). Never one of the current epoch: the lost transaction it seals
  // out still passes its fence there and would land in the freed key; once
  // the cluster is in a later epoch that fence refuses it for good.
  void ClearSeals(const std::vector<std::string>& records);
  // The writebacks whose decision is unknown (RecordDecision), resolved as
  // soon as the coordinator answers: recorded, they commit on every node;
  // not recorded, their attempt is sealed and every node drops their
  // staged slices. A failure leaves them to the next formation
  // (ResolvePendingCommits reads every record and drops whatever else is
  // staged: a later epoch, where the lost transaction's fence refuses it),
  // and AbortAll forgets them.
  void ResolveUndecided();
  // Every decision recorded and not yet forgotten, by session; abort
  // records are skipped, those of earlier epochs added to `seals` (records
  // under commits/) when it is given.
  std::map<std::string, Decision> RecordedDecisions(
      std::vector<std::string>* seals = nullptr);

  ModelRegistry* const registry_;
  const Options options_;
  // The single-node default when Options::node_ops is null.
  LocalCommunicator local_communicator_;
  std::unique_ptr<NodeRuntime> local_runtime_;
  std::unique_ptr<NodeOps> local_ops_;
  NodeOps* const ops_;

  mutable absl::Mutex mu_;
  absl::CondVar released_;  // Signalled when a session leaves a unit.
  std::map<std::string, std::shared_ptr<SessionRecord>> sessions_
      ABSL_GUARDED_BY(mu_);
  // R25: ended sessions by id, and their ids oldest first (the bound).
  struct Tombstone {
    std::string owner;
    std::string reason;
    absl::Time ended;
  };
  std::map<std::string, Tombstone> tombstones_ ABSL_GUARDED_BY(mu_);
  // The epoch tags of the ids this manager issued (one per epoch it led in,
  // a handful): an unknown id of any other nonzero tag was issued by an
  // earlier leader, whose sessions went with it.
  std::set<uint32_t> opened_epoch_tags_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> tombstone_order_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<GatherRecord>> shareable_gathers_
      ABSL_GUARDED_BY(mu_);
  // Bytes of session copies (and private tensors) held on each node.
  std::vector<int64_t> memory_per_node_ ABSL_GUARDED_BY(mu_);
  // Collectives get consecutive numbers; every node runs them in order.
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t sequence_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // Of next_sequence_.
  // COMMITs decided but not yet acknowledged by every node, by session.
  std::map<std::string, Decision> pending_commits_ ABSL_GUARDED_BY(mu_);
  // Writebacks whose decision is unknown, by session (ResolveUndecided).
  std::map<std::string, Decision> undecided_ ABSL_GUARDED_BY(mu_);
  // Applied COMMITs' coordinator records (under commits/), which the
  // reaper deletes.
  std::vector<std::string> decisions_to_clear_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_SESSION_MANAGER_H_
