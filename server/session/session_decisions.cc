// SessionManager: the decision log of the two-phase writeback (Close in
// session_writeback.cc). Each COMMIT decision is recorded before any node
// applies it: on a cluster on etcd in commits/<session>/<attempt>, else in
// <data-dir>/commits/<session>.json. Also what a lost answer leaves behind:
// the read-back, the seal that makes "not decided" final, and the
// undecided writebacks the reaper resolves once etcd answers.
//
// Why one record per attempt: a retried close of the same session decides
// again, so a per-session key sealed "aborted" would refuse every retry.
// The attempt (the PREPARE's epoch and number) is unique across epochs and
// retries, so each attempt has its own "decided or aborted" record, and
// each record is written once (PutMode::kCreate).

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/coordinator.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// A commit decision's record: the same JSON in etcd and in the data dir.
std::string DecisionText(const CommitOp& commit, const std::string& attempt) {
  nlohmann::json targets = nlohmann::json::object();
  for (const auto& [unit, generation] : commit.target_generations) {
    targets[std::to_string(unit)] = generation;
  }
  const nlohmann::json record = {{"model", commit.model},
                                 {"gather_id", commit.gather_id},
                                 {"session_id", commit.session_id},
                                 {"attempt", attempt},
                                 {"targets", targets}};
  return record.dump();
}

// An attempt's abort record, the seal: it holds the attempt's key so that
// its decision can no longer be created there. Its epoch says when it may
// go (SessionManager::ClearSeals).
std::string SealText(const std::string& session_id, const std::string& attempt,
                     uint64_t epoch) {
  const nlohmann::json record = {{"aborted", true},
                                 {"session_id", session_id},
                                 {"attempt", attempt},
                                 {"epoch", epoch}};
  return record.dump();
}

std::optional<CommitOp> ParseDecision(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("model") ||
      !record["model"].is_string() || !record.contains("gather_id") ||
      !record["gather_id"].is_string() || !record.contains("session_id") ||
      !record["session_id"].is_string() || !record.contains("targets") ||
      !record["targets"].is_object()) {
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

// A seal's epoch; nullopt when `record` is no seal.
std::optional<uint64_t> SealEpoch(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("aborted") ||
      record["aborted"] != true) {
    return std::nullopt;
  }
  return record.contains("epoch") && record["epoch"].is_number_unsigned()
             ? record["epoch"].get<uint64_t>()
             : 0;
}

}  // namespace

absl::Status SessionManager::RecordDecision(Decision& decision) {
  const CommitOp& commit = decision.commit;
  decision.text = DecisionText(commit, decision.attempt);
  if (options_.coordinator != nullptr) {
    decision.record = absl::StrCat(commit.session_id, "/", decision.attempt);
    const absl::Status recorded = RecordCommitDecision(
        *options_.coordinator, decision.record, decision.text, decision.epoch);
    return ConfirmDecision(decision, recorded);
  }
  // The data dir's log answers at once: no lost answer, no attempt key.
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return absl::OkStatus();
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(data_dir) / "commits";
  std::filesystem::create_directories(dir, error);
  const std::filesystem::path temp = dir / (commit.session_id + ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    out << decision.text << "\n";
    out.flush();
  }
  std::filesystem::rename(temp, dir / (commit.session_id + ".json"), error);
  if (error) {
    spdlog::error("commit decision of {} not recorded: {}", commit.session_id,
                  error.message());
  }
  return absl::OkStatus();
}

absl::Status SessionManager::ConfirmDecision(const Decision& decision,
                                             const absl::Status& recorded) {
  // Refused by etcd (a deposed epoch, another decision): not made. Not
  // answered: etcd may have applied it all the same, and a leader that
  // aborted its own staged slices then would leave its ranks behind when
  // the next leader completes the decision (a half-applied writeback).
  if (recorded.ok() || absl::IsAborted(recorded) ||
      absl::IsAlreadyExists(recorded) || absl::IsFailedPrecondition(recorded)) {
    return recorded;
  }
  absl::StatusOr<std::optional<std::string>> found =
      CommitDecision(*options_.coordinator, decision.record);
  if (!found.ok()) {
    return absl::UnknownError(absl::StrCat(
        "the coordinator did not answer the decision (", recorded.message(),
        ") nor its read-back (", found.status().message(), ")"));
  }
  if (!found->has_value()) return Seal(decision, recorded);
  if (**found == decision.text) {
    spdlog::warn(
        "commit decision of {} was recorded although its transaction "
        "answered {}",
        decision.commit.session_id, recorded.ToString());
    return absl::OkStatus();
  }
  if (**found ==
      SealText(decision.commit.session_id, decision.attempt, decision.epoch)) {
    return recorded;  // Sealed before (that seal's answer was lost).
  }
  return absl::UnknownError(absl::StrCat("commit record ", decision.record,
                                         " holds neither the decision nor "
                                         "its seal"));
}

absl::Status SessionManager::Seal(const Decision& decision,
                                  const absl::Status& recorded) {
  const std::string& id = decision.commit.session_id;
  const std::string seal = SealText(id, decision.attempt, decision.epoch);
  // The decision's own fence: refused (ABORTED), that fence fails from now
  // on (epochs only grow; an election key never comes back), so the lost
  // transaction cannot land either, and "not decided" is final as well.
  const absl::Status sealed = RecordCommitDecision(
      *options_.coordinator, decision.record, seal, decision.epoch);
  if (sealed.ok() || absl::IsAborted(sealed)) {
    spdlog::warn("commit decision of {} (attempt {}) sealed not decided: {}",
                 id, decision.attempt,
                 sealed.ok() ? "abort record written" : sealed.ToString());
    return recorded;
  }
  if (absl::IsAlreadyExists(sealed)) {
    // The lost transaction landed between the read-back and the seal.
    absl::StatusOr<std::optional<std::string>> found =
        CommitDecision(*options_.coordinator, decision.record);
    if (found.ok() && found->has_value() && **found == decision.text) {
      spdlog::warn(
          "commit decision of {} landed after its read-back found nothing: "
          "decided",
          id);
      return absl::OkStatus();
    }
    if (found.ok() && found->has_value() && **found == seal) return recorded;
  }
  return absl::UnknownError(absl::StrCat(
      "the coordinator did not answer the decision (", recorded.message(),
      ") nor its abort record (", sealed.message(), ")"));
}

void SessionManager::ForgetDecision(const Decision& decision) {
  if (!ops_->AbsentNodes().empty()) return;
  if (options_.coordinator != nullptr) {
    absl::MutexLock lock(&mu_);
    decisions_to_clear_.push_back(decision.record);
    return;
  }
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return;
  std::error_code error;
  std::filesystem::remove(std::filesystem::path(data_dir) / "commits" /
                              (decision.commit.session_id + ".json"),
                          error);
}

void SessionManager::ClearDecisions() {
  std::vector<std::string> applied;
  {
    absl::MutexLock lock(&mu_);
    applied.swap(decisions_to_clear_);
  }
  for (const std::string& record : applied) {
    // Left behind (no quorum now, a new epoch), the record is completed
    // again by a later leader: a COMMIT applied twice changes nothing
    // (NodeRuntime::Commit).
    if (absl::Status deleted = options_.coordinator->Delete(
            coordinator_keys::Commit(record),
            Coordinator::Fence{ops_->Epoch(), /*leader=*/true});
        !deleted.ok()) {
      spdlog::warn("commit decision {} not cleared: {}", record,
                   deleted.ToString());
    }
  }
}

void SessionManager::ClearSeals(const std::vector<std::string>& records) {
  for (const std::string& record : records) {
    // Left behind, the next formation tries again; it only takes space.
    if (absl::Status deleted = options_.coordinator->Delete(
            coordinator_keys::Commit(record),
            Coordinator::Fence{ops_->Epoch(), /*leader=*/true});
        !deleted.ok()) {
      spdlog::warn("abort record {} not cleared: {}", record,
                   deleted.ToString());
    }
  }
}

void SessionManager::ResolveUndecided() {
  std::map<std::string, Decision> undecided;
  {
    absl::MutexLock lock(&mu_);
    undecided = undecided_;
  }
  for (auto& [id, decision] : undecided) {
    // Read back, and sealed when absent, as a close does.
    const absl::Status confirmed = ConfirmDecision(
        decision, absl::UnavailableError("the decision's answer was lost"));
    if (absl::IsUnknown(confirmed)) continue;  // No answer: the next round.
    if (!confirmed.ok()) {
      ops_->Abort(id);
      spdlog::warn("session writeback id={} was not decided: dropped", id);
    } else {
      CommitOp& commit = decision.commit;
      {
        absl::MutexLock lock(&mu_);
        Number(commit);
        pending_commits_[id] = decision;
      }
      if (absl::Status status = ops_->Commit(commit); !status.ok()) {
        // Pending like any decided commit: the next formation completes it.
        spdlog::error("session commit incomplete id={}: {}", id,
                      status.ToString());
      } else {
        ForgetDecision(decision);
        absl::MutexLock lock(&mu_);
        pending_commits_.erase(id);
        spdlog::info("session writeback id={} was decided: committed", id);
      }
    }
    absl::MutexLock lock(&mu_);
    undecided_.erase(id);
  }
}

std::map<std::string, SessionManager::Decision>
SessionManager::RecordedDecisions(std::vector<std::string>* seals) {
  std::map<std::string, Decision> recorded;
  if (options_.coordinator != nullptr) {
    absl::StatusOr<std::map<std::string, std::string>> listed =
        options_.coordinator->List(coordinator_keys::kCommitsPrefix);
    if (!listed.ok()) {
      spdlog::error("commit decisions not read: {}",
                    listed.status().ToString());
      return recorded;
    }
    const uint64_t epoch = ops_->Epoch();
    for (const auto& [key, text] : *listed) {
      const nlohmann::json record =
          nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      const std::string name =
          key.substr(std::string(coordinator_keys::kCommitsPrefix).size());
      if (std::optional<uint64_t> sealed = SealEpoch(record)) {
        // Not decided, and never to be: nothing to complete.
        if (seals != nullptr && *sealed < epoch) seals->push_back(name);
        continue;
      }
      std::optional<CommitOp> commit = ParseDecision(record);
      if (!commit.has_value()) {
        spdlog::error("commit decision {} is malformed; skipped", key);
        continue;
      }
      Decision& decision = recorded[commit->session_id];
      decision.commit = *std::move(commit);
      decision.text = text;
      decision.record = name;
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
    std::optional<CommitOp> commit = ParseDecision(
        nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false));
    if (!commit.has_value()) {
      spdlog::error("commit decision {} is malformed; skipped",
                    file.path().string());
      continue;
    }
    recorded[commit->session_id].commit = *std::move(commit);
  }
  return recorded;
}

}  // namespace summon::server
