// SessionManager: the session's side of the two-phase writeback. Close
// decides: R7 (no scoped unit moved since the gather, unless forced),
// PREPARE on every node, and only when every node staged, the COMMIT
// decision, recorded in the decision log before any node applies it (R8).
// Also the log itself and finishing decided commits after a failure or a
// restart. The node's side (stage, publish, drop) is
// server/runtime/node_writeback.cc.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/coordinator.h"
#include "server/runtime/fault_points.h"
#include "server/session/session_internal.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// A decided commit's retries while the cluster forms.
constexpr int kCommitAttempts = 10;
constexpr absl::Duration kCommitRetry = absl::Milliseconds(200);

// A commit decision's record: the same JSON in etcd and in the data dir.
std::string DecisionText(const CommitOp& commit) {
  nlohmann::json targets = nlohmann::json::object();
  for (const auto& [unit, generation] : commit.target_generations) {
    targets[std::to_string(unit)] = generation;
  }
  const nlohmann::json record = {{"model", commit.model},
                                 {"gather_id", commit.gather_id},
                                 {"session_id", commit.session_id},
                                 {"targets", targets}};
  return record.dump();
}

std::optional<CommitOp> ParseDecision(const std::string& text) {
  const nlohmann::json record =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object() ||
      !record.contains("model") || !record["model"].is_string() ||
      !record.contains("gather_id") || !record["gather_id"].is_string() ||
      !record.contains("session_id") || !record["session_id"].is_string() ||
      !record.contains("targets") || !record["targets"].is_object()) {
    return std::nullopt;
  }
  CommitOp commit;
  commit.model = record["model"].get<std::string>();
  commit.gather_id = record["gather_id"].get<std::string>();
  commit.session_id = record["session_id"].get<std::string>();
  for (const auto& [unit, generation] : record["targets"].items()) {
    if (generation.is_number_unsigned()) {
      commit.target_generations[std::atoi(unit.c_str())] =
          generation.get<uint64_t>();
    }
  }
  return commit;
}

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
  CommitOp commit{0, session->model->name, prepare.gather_id, id,
                  prepare.target_generations};
  // Every node staged: the decision is COMMIT, recorded before any node
  // applies it, so that it completes even if a node (or the leader) fails
  // now. Not recorded (a deposed epoch, etcd without quorum): not decided.
  if (absl::Status recorded = RecordDecision(commit);
      absl::IsUnknown(recorded)) {
    // Decided or not, every node keeps its staged slices: dropped here,
    // they would be missing where a later leader completes the decision
    // (a writeback applied on some ranks only).
    absl::MutexLock lock(&mu_);
    undecided_[id] = commit;
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
    ops_->Abort(id);
    absl::MutexLock lock(&mu_);
    session->state = core::SessionState::kOpen;
    spdlog::warn("session writeback not decided id={} model={}: {}", id,
                 session->model->name, recorded.ToString());
    return absl::Status(
        recorded.code(),
        absl::StrCat("the writeback of session ", id,
                     " was not decided, nothing was committed: ",
                     recorded.message()));
  }
  FaultPoint("commit.decided");
  {
    absl::MutexLock lock(&mu_);
    Number(commit);
    pending_commits_[id] = commit;
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
  Finish(*session, core::SessionState::kClosed, "closed");
  spdlog::info(
      "session writeback id={} principal={} model={} scope={} bytes={} "
      "duration_ms={}",
      id, principal, session->model->name, ScopeText(session->options.scope),
      result.bytes_written,
      absl::ToInt64Milliseconds(options_.clock() - started));
  return result;
}

absl::Status SessionManager::RecordDecision(const CommitOp& commit) {
  const std::string text = DecisionText(commit);
  if (options_.coordinator != nullptr) {
    const absl::Status recorded = RecordCommitDecision(
        *options_.coordinator, commit.session_id, text, ops_->Epoch());
    return ConfirmDecision(text, commit, recorded);
  }
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return absl::OkStatus();
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(data_dir) / "commits";
  std::filesystem::create_directories(dir, error);
  const std::filesystem::path temp = dir / (commit.session_id + ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text << "\n";
    out.flush();
  }
  std::filesystem::rename(temp, dir / (commit.session_id + ".json"), error);
  if (error) {
    spdlog::error("commit decision of {} not recorded: {}", commit.session_id,
                  error.message());
  }
  return absl::OkStatus();
}

absl::Status SessionManager::ConfirmDecision(const std::string& text,
                                             const CommitOp& commit,
                                             const absl::Status& recorded) {
  // Refused by etcd (a deposed epoch, another decision): not made. Not
  // answered: etcd may have applied it all the same, and a leader that
  // aborted its own staged slices then would leave its ranks behind when
  // the next leader completes the decision (a half-applied writeback).
  if (recorded.ok() || absl::IsAborted(recorded) ||
      absl::IsAlreadyExists(recorded) ||
      absl::IsFailedPrecondition(recorded)) {
    return recorded;
  }
  absl::StatusOr<std::optional<std::string>> found =
      CommitDecision(*options_.coordinator, commit.session_id);
  if (found.ok() && found->has_value() && **found == text) {
    spdlog::warn(
        "commit decision of {} was recorded although its transaction "
        "answered {}",
        commit.session_id, recorded.ToString());
    return absl::OkStatus();
  }
  if (!found.ok()) {
    return absl::UnknownError(absl::StrCat(
        "the coordinator did not answer the decision (", recorded.message(),
        ") nor its read-back (", found.status().message(), ")"));
  }
  return recorded;
}

void SessionManager::ForgetDecision(const std::string& session_id) {
  if (!ops_->AbsentNodes().empty()) return;
  if (options_.coordinator != nullptr) {
    absl::MutexLock lock(&mu_);
    decisions_to_clear_.push_back(session_id);
    return;
  }
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return;
  std::error_code error;
  std::filesystem::remove(
      std::filesystem::path(data_dir) / "commits" / (session_id + ".json"),
      error);
}

void SessionManager::ClearDecisions() {
  std::vector<std::string> applied;
  {
    absl::MutexLock lock(&mu_);
    applied.swap(decisions_to_clear_);
  }
  for (const std::string& session_id : applied) {
    // Left behind (no quorum now, a new epoch), the record is completed
    // again by a later leader: a COMMIT applied twice changes nothing
    // (NodeRuntime::Commit).
    if (absl::Status deleted = options_.coordinator->Delete(
            coordinator_keys::Commit(session_id),
            Coordinator::Fence{ops_->Epoch(), /*leader=*/true});
        !deleted.ok()) {
      spdlog::warn("commit decision of {} not cleared: {}", session_id,
                   deleted.ToString());
    }
  }
}

void SessionManager::ResolveUndecided() {
  std::map<std::string, CommitOp> undecided;
  {
    absl::MutexLock lock(&mu_);
    undecided = undecided_;
  }
  for (auto& [id, commit] : undecided) {
    absl::StatusOr<std::optional<std::string>> found =
        CommitDecision(*options_.coordinator, id);
    if (!found.ok()) continue;  // Still no answer: the next round.
    if (!found->has_value()) {
      ops_->Abort(id);
      spdlog::warn("session writeback id={} was not decided: dropped", id);
    } else {
      {
        absl::MutexLock lock(&mu_);
        Number(commit);
        pending_commits_[id] = commit;
      }
      if (absl::Status status = ops_->Commit(commit); !status.ok()) {
        // Pending like any decided commit: the next formation completes it.
        spdlog::error("session commit incomplete id={}: {}", id,
                      status.ToString());
      } else {
        ForgetDecision(id);
        absl::MutexLock lock(&mu_);
        pending_commits_.erase(id);
        spdlog::info("session writeback id={} was decided: committed", id);
      }
    }
    absl::MutexLock lock(&mu_);
    undecided_.erase(id);
  }
}

std::map<std::string, CommitOp> SessionManager::RecordedDecisions() {
  std::map<std::string, CommitOp> recorded;
  if (options_.coordinator != nullptr) {
    absl::StatusOr<std::map<std::string, std::string>> listed =
        options_.coordinator->List(coordinator_keys::kCommitsPrefix);
    if (!listed.ok()) {
      spdlog::error("commit decisions not read: {}",
                    listed.status().ToString());
      return recorded;
    }
    for (const auto& [key, text] : *listed) {
      std::optional<CommitOp> commit = ParseDecision(text);
      if (!commit.has_value()) {
        spdlog::error("commit decision {} is malformed; skipped", key);
        continue;
      }
      recorded[commit->session_id] = *commit;
    }
    return recorded;
  }
  const std::string& data_dir = registry_->options().data_dir;
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(data_dir) / "commits";
  if (data_dir.empty() || !std::filesystem::exists(dir, error)) {
    return recorded;
  }
  for (const auto& file : std::filesystem::directory_iterator(dir, error)) {
    if (file.path().extension() != ".json") continue;
    std::ifstream in(file.path());
    std::stringstream text;
    text << in.rdbuf();
    std::optional<CommitOp> commit = ParseDecision(text.str());
    if (!commit.has_value()) {
      spdlog::error("commit decision {} is malformed; skipped",
                    file.path().string());
      continue;
    }
    recorded[commit->session_id] = *commit;
  }
  return recorded;
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
  std::map<std::string, CommitOp> pending;
  {
    absl::MutexLock lock(&mu_);
    pending = pending_commits_;
  }
  // Decisions of an earlier life of this daemon, or (on etcd) of whichever
  // node led before.
  for (auto& [id, commit] : RecordedDecisions()) pending[id] = commit;
  absl::Status unresolved = absl::OkStatus();
  const std::set<int> absent = ops_->AbsentNodes();
  for (auto& [id, commit] : pending) {
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
    ForgetDecision(id);
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
