// SessionManager: the decision log of the two-phase writeback (R8) and
// finishing decided commits after a failure or a restart.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/session/session_internal.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// A decided commit's retries while the cluster forms.
constexpr int kCommitAttempts = 10;
constexpr absl::Duration kCommitRetry = absl::Milliseconds(200);

}  // namespace

void SessionManager::RecordDecision(const CommitOp& commit) {
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return;
  nlohmann::json targets = nlohmann::json::object();
  for (const auto& [unit, generation] : commit.target_generations) {
    targets[std::to_string(unit)] = generation;
  }
  const nlohmann::json record = {{"model", commit.model},
                                 {"gather_id", commit.gather_id},
                                 {"session_id", commit.session_id},
                                 {"targets", targets}};
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(data_dir) / "commits";
  std::filesystem::create_directories(dir, error);
  const std::filesystem::path temp = dir / (commit.session_id + ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    out << record.dump() << "\n";
    out.flush();
  }
  std::filesystem::rename(temp, dir / (commit.session_id + ".json"), error);
  if (error) {
    spdlog::error("commit decision of {} not recorded: {}", commit.session_id,
                  error.message());
  }
}

void SessionManager::ForgetDecision(const std::string& session_id) {
  const std::string& data_dir = registry_->options().data_dir;
  if (data_dir.empty()) return;
  std::error_code error;
  std::filesystem::remove(
      std::filesystem::path(data_dir) / "commits" / (session_id + ".json"),
      error);
}

absl::Status SessionManager::OnClusterFormed() {
  {
    absl::MutexLock lock(&mu_);
    next_sequence_ = 1;
  }
  return ResolvePendingCommits();
}

absl::Status SessionManager::ResolvePendingCommits() {
  std::map<std::string, CommitOp> pending;
  {
    absl::MutexLock lock(&mu_);
    pending = pending_commits_;
  }
  // Decisions of an earlier life of this daemon.
  const std::string& data_dir = registry_->options().data_dir;
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(data_dir) / "commits";
  if (!data_dir.empty() && std::filesystem::exists(dir, error)) {
    for (const auto& file : std::filesystem::directory_iterator(dir, error)) {
      if (file.path().extension() != ".json") continue;
      std::ifstream in(file.path());
      std::stringstream text;
      text << in.rdbuf();
      const nlohmann::json record = nlohmann::json::parse(
          text.str(), nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded() || !record.is_object() ||
          !record.contains("model") || !record["model"].is_string() ||
          !record.contains("gather_id") || !record["gather_id"].is_string() ||
          !record.contains("session_id") || !record["session_id"].is_string() ||
          !record.contains("targets") || !record["targets"].is_object()) {
        spdlog::error("commit decision {} is malformed; skipped",
                      file.path().string());
        continue;
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
      pending[commit.session_id] = commit;
    }
  }
  absl::Status unresolved = absl::OkStatus();
  for (auto& [id, commit] : pending) {
    commit.sequence = 0;  // Nothing else runs while the cluster forms.
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
          (*model)->runtime.units[unit].generation = generation;
        }
      }
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
