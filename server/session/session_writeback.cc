// SessionManager: the session's side of the two-phase writeback. Close
// decides: R7 (no scoped unit moved since the gather, unless forced),
// PREPARE on every node, and only when every node staged, the COMMIT
// decision, recorded in the decision log before any node applies it (R8),
// and finishing decided commits after a failure or a restart. The log
// itself is session_decisions.cc. The node's side (stage, publish, drop) is
// server/runtime/node_writeback.cc.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/runtime/fault_points.h"
#include "server/session/session_internal.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// A decided commit's retries while the cluster forms.
constexpr int kCommitAttempts = 10;
constexpr absl::Duration kCommitRetry = absl::Milliseconds(200);

}  // namespace

absl::StatusOr<CloseResult> SessionManager::Close(
    const std::string& id, bool abort, bool force, const std::string& principal,
    const std::function<bool()>& cancelled) {
  const absl::Time started = options_.clock();
  std::shared_ptr<SessionRecord> session;
  PrepareOp prepare;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SessionRecord>> found =
        FindSession(id, principal);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    if (absl::Status status =
            core::CheckTransition(session->state, core::SessionState::kClosing);
        !status.ok()) {
      return status;
    }
    if (abort || !session->writable() || !session->written) {
      // R22: no writeback (no generation or external-write move) for an
      // abort, a read-only session, or a writable one nothing was written
      // into.
      CloseResult result;
      result.reason = abort                  ? "aborted"
                      : !session->writable() ? "read-only session"
                                             : "nothing written";
      Finish(*session, core::SessionState::kClosed,
             abort ? "aborted by client" : "closed");
      spdlog::info(
          "session {} id={} principal={} model={} scope={} bytes={} "
          "writeback=none ({})",
          abort ? "abort" : "close", id, principal, session->model->name,
          ScopeText(session->options.scope), session->gather->bytes,
          result.reason);
      return result;
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
    Number(prepare);
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
  Decision decision;
  decision.commit = CommitOp{0, session->model->name, prepare.gather_id, id,
                             prepare.target_generations};
  // This attempt's own record (a retried close is another attempt): its
  // PREPARE's epoch and number, unique across epochs and retries.
  decision.epoch = prepare.epoch;
  decision.attempt = absl::StrCat(prepare.epoch, "-", prepare.sequence);
  CommitOp& commit = decision.commit;
  // Every node staged: the decision is COMMIT, recorded before any node
  // applies it, so that it completes even if a node (or the leader) fails
  // now. Not recorded (a deposed epoch, etcd without quorum, or an answer
  // lost and the attempt sealed aborted): not decided.
  if (absl::Status recorded = RecordDecision(decision);
      absl::IsUnknown(recorded)) {
    // Decided or not, every node keeps its staged slices: dropped here,
    // they would be missing where a later leader completes the decision
    // (a writeback applied on some ranks only).
    absl::MutexLock lock(&mu_);
    undecided_[id] = decision;
    Finish(*session, core::SessionState::kFailed,
           "closed; whether its writeback was decided is unknown (the "
           "coordinator did not answer), it completes on every rank or on "
           "none once the coordinator answers");
    spdlog::error("session writeback undecided id={} model={}: {}", id,
                  session->model->name, recorded.ToString());
    return absl::UnavailableError(absl::StrCat(
        "the writeback of session ", id, " may or may not have been decided (",
        recorded.message(),
        "); it completes on every rank or on none once the coordinator "
        "answers: read the tensors to see which"));
  } else if (!recorded.ok()) {
    // Final: refused, or its record sealed aborted (ConfirmDecision), so
    // no late transaction can decide it after these slices are dropped.
    ops_->Abort(id);
    absl::MutexLock lock(&mu_);
    session->state = core::SessionState::kOpen;
    spdlog::warn("session writeback not decided id={} model={}: {}", id,
                 session->model->name, recorded.ToString());
    return absl::Status(
        recorded.code(),
        absl::StrCat(
            "the writeback of session ", id,
            " was not decided, nothing was committed: ", recorded.message()));
  }
  FaultPoint("commit.decided");
  {
    absl::MutexLock lock(&mu_);
    Number(commit);
    pending_commits_[id] = decision;
  }
  if (absl::Status status = ops_->Commit(commit); !status.ok()) {
    // Staged data stays in shared memory; the commit completes on every
    // node when the cluster re-forms.
    spdlog::error("session commit incomplete id={} model={}: {}", id,
                  session->model->name, status.ToString());
    absl::MutexLock lock(&mu_);
    Finish(*session, core::SessionState::kFailed,
           "closed; its writeback was decided but did not reach every node, "
           "it completes when the cluster re-forms");
    return absl::UnavailableError(
        absl::StrCat("the writeback of session ", id,
                     " was decided but did not reach "
                     "every node (",
                     status.message(),
                     "); it completes on every rank when "
                     "the cluster re-forms"));
  }
  ForgetDecision(decision);
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
  Finish(*session, core::SessionState::kClosed, "closed");
  spdlog::info(
      "session writeback id={} principal={} model={} scope={} bytes={} "
      "duration_ms={}",
      id, principal, session->model->name, ScopeText(session->options.scope),
      result.bytes_written,
      absl::ToInt64Milliseconds(options_.clock() - started));
  return result;
}

absl::Status SessionManager::OnClusterFormed() {
  {
    absl::MutexLock lock(&mu_);
    SequenceEpoch();
  }
  if (absl::Status resolved = ResolvePendingCommits(); !resolved.ok()) {
    return resolved;
  }
  return CatchUpReturningNodes();
}

absl::Status SessionManager::ResolvePendingCommits() {
  std::map<std::string, Decision> pending;
  {
    absl::MutexLock lock(&mu_);
    pending = pending_commits_;
  }
  // Decisions of an earlier life of this daemon, or (on etcd) of whichever
  // node led before; abort records of earlier epochs go (ClearSeals).
  std::vector<std::string> seals;
  for (auto& [id, decision] : RecordedDecisions(&seals)) {
    pending[id] = decision;
  }
  ClearSeals(seals);
  absl::Status unresolved = absl::OkStatus();
  const std::set<int> absent = ops_->AbsentNodes();
  for (auto& [id, decision] : pending) {
    CommitOp& commit = decision.commit;
    commit.sequence = 0;  // Nothing else runs while the cluster forms.
    commit.epoch = ops_->Epoch();
    // A peer that just restarted may need a moment before it answers.
    absl::Status status;
    for (int attempt = 0; attempt < kCommitAttempts; ++attempt) {
      status = ops_->Commit(commit);
      if (status.ok()) break;
      absl::SleepFor(kCommitRetry);
    }
    if (!status.ok()) {
      spdlog::error("session commit still incomplete id={}: {}", id,
                    status.ToString());
      unresolved = absl::UnavailableError(
          absl::StrCat("the decided writeback of session ", id,
                       " could not complete: ", status.message()));
      continue;
    }
    absl::StatusOr<std::shared_ptr<ModelEntry>> model =
        registry_->Get(commit.model);
    if (model.ok()) {
      absl::MutexLock runtime_lock(&(*model)->runtime_mu);
      for (const auto& [unit, generation] : commit.target_generations) {
        if (unit >= 0 &&
            unit < static_cast<int>((*model)->runtime.units.size())) {
          // Never back: a decision completed again (its record outlived
          // its COMMIT) is older than what later writebacks set.
          uint64_t& current = (*model)->runtime.units[unit].generation;
          current = std::max(current, generation);
        }
      }
    }
    if (!absent.empty()) {
      // A node of the list that is away (its staged data kept in its shared
      // memory) applies it when it is back: the decision stays, recorded
      // and pending, and the formation that takes that node in issues it
      // again (idempotent where it was applied: NodeRuntime::Commit).
      // Forgotten now, that node would come back without it: a writeback
      // half applied, its ranks' old bytes read beside the others' new.
      spdlog::info(
          "session commit completed on the members id={}; kept for node(s) "
          "{}",
          id, absl::StrJoin(absent, ", "));
      continue;
    }
    ForgetDecision(decision);
    absl::MutexLock lock(&mu_);
    pending_commits_.erase(id);
    spdlog::info("session commit completed after recovery id={}", id);
  }
  // Whatever else is staged anywhere belongs to writebacks that were never
  // decided: shards stay as they were.
  if (unresolved.ok()) ops_->Abort("");
  return unresolved;
}

}  // namespace summon::server
