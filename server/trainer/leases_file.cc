// The leases file of the data dir, <data-dir>/trainers.json: the attached
// trainers' leases, every model's phases, steps and optimizer-step count,
// and the ranks' last events, written after each change and read back by a
// restarted daemon (see TrainerLeases). Apart from trainer_leases.cc, which
// decides attaches, renewals and lapses; this file only turns that state
// into records and back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/trainer/trainer_leases.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;

// The longest record written in place: one page at offset 0 is copied into
// the page cache whole, so a process killed mid-write leaves the old record
// or the new one (a longer write can stop at a page boundary).
constexpr size_t kInPlaceBytes = 4096;

}  // namespace

void TrainerLeases::Persist() {
  absl::MutexLock lock(&mu_);
  PersistLocked();
}

void TrainerLeases::PersistLocked() {
  if (options_.data_dir.empty()) return;
  nlohmann::json record;
  record["leases"] = nlohmann::json::array();
  for (const auto& [id, lease] : leases_) {
    record["leases"].push_back(
        {{"id", id},
         {"model", lease.model},
         {"incarnation", lease.incarnation},
         {"ranks", lease.ranks},
         {"lease_ms", absl::ToInt64Milliseconds(lease.ttl)}});
  }
  record["models"] = nlohmann::json::object();
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    absl::MutexLock runtime_lock(&model->runtime_mu);
    nlohmann::json phases = nlohmann::json::array();
    nlohmann::json steps = nlohmann::json::array();
    for (size_t rank = 0; rank < model->runtime.phase_per_rank.size(); ++rank) {
      phases.push_back(std::string(
          core::TrainingPhaseName(model->runtime.phase_per_rank[rank])));
      steps.push_back(model->steps[rank].has_value()
                          ? nlohmann::json(*model->steps[rank])
                          : nlohmann::json(nullptr));
    }
    record["models"][model->name] = {
        {"phases", phases},
        {"steps", steps},
        {"optimizer_entries", model->optimizer_entries},
        {"last_optimizer_step",
         model->last_optimizer_step.has_value()
             ? nlohmann::json(*model->last_optimizer_step)
             : nlohmann::json(nullptr)}};
  }
  record["events"] = nlohmann::json::array();
  for (const auto& [key, event] : last_event_) {
    record["events"].push_back(
        {{"model", key.first}, {"rank", key.second}, {"event", event}});
  }
  const std::string text = record.dump() + "\n";
  if (OverwriteInPlace(text)) return;
  const fs::path path = fs::path(options_.data_dir) / "trainers.json";
  const fs::path temp = fs::path(options_.data_dir) / "trainers.json.tmp";
  if (leases_fd_ >= 0) {  // the rename below replaces the file it has open
    close(leases_fd_);
    leases_fd_ = -1;
  }
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    if (!out) {
      spdlog::error(
          "cannot write {}: trainer phases will not survive a "
          "restart",
          temp.string());
      return;
    }
  }
  std::error_code error;
  fs::rename(temp, path, error);
  if (error) {
    spdlog::error("cannot rename {}: {}", temp.string(), error.message());
  }
}

bool TrainerLeases::OverwriteInPlace(const std::string& record) {
  if (record.size() > kInPlaceBytes) return false;
  if (leases_fd_ < 0) {
    const fs::path path = fs::path(options_.data_dir) / "trainers.json";
    leases_fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat status;
    if (leases_fd_ < 0 || fstat(leases_fd_, &status) != 0) {
      if (leases_fd_ >= 0) close(leases_fd_);
      leases_fd_ = -1;
      return false;
    }
    leases_file_bytes_ = static_cast<size_t>(status.st_size);
  }
  // Padded to the file's length (JSON allows trailing whitespace), so no
  // ftruncate, which a crash could separate from the write.
  if (leases_file_bytes_ > kInPlaceBytes) return false;  // a rename shrinks it
  std::string padded = record;
  if (padded.size() < leases_file_bytes_) padded.resize(leases_file_bytes_, ' ');
  if (pwrite(leases_fd_, padded.data(), padded.size(), 0) !=
      static_cast<ssize_t>(padded.size())) {
    return false;  // the rename writes it whole
  }
  leases_file_bytes_ = padded.size();
  return true;
}

absl::Status TrainerLeases::Recover() {
  if (options_.data_dir.empty()) return absl::OkStatus();
  const fs::path path = fs::path(options_.data_dir) / "trainers.json";
  std::ifstream in(path);
  if (!in) return absl::OkStatus();
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json record =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    spdlog::error("{} is malformed; trainer phases start IDLE", path.string());
    return absl::OkStatus();
  }
  try {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock();
    const nlohmann::json models =
        record.value("models", nlohmann::json::object());
    const nlohmann::json leases =
        record.value("leases", nlohmann::json::array());
    const nlohmann::json events =
        record.value("events", nlohmann::json::array());
    for (const auto& [name, state] : models.items()) {
      absl::StatusOr<std::shared_ptr<ModelEntry>> model = registry_->Find(name);
      if (!model.ok()) continue;
      ModelEntry& entry = **model;
      absl::MutexLock runtime_lock(&entry.runtime_mu);
      const nlohmann::json& phases = state.at("phases");
      const nlohmann::json& steps = state.at("steps");
      const nlohmann::json& entries = state.at("optimizer_entries");
      if (phases.size() != entry.runtime.phase_per_rank.size() ||
          steps.size() != phases.size() || entries.size() != phases.size()) {
        continue;
      }
      for (size_t rank = 0; rank < phases.size(); ++rank) {
        absl::StatusOr<core::TrainingPhase> phase =
            core::ParseTrainingPhase(phases[rank].get<std::string>());
        if (phase.ok()) entry.runtime.phase_per_rank[rank] = *phase;
        if (!steps[rank].is_null())
          entry.steps[rank] = steps[rank].get<int64_t>();
        entry.optimizer_entries[rank] = entries[rank].get<int64_t>();
      }
      if (!state.at("last_optimizer_step").is_null()) {
        entry.last_optimizer_step =
            state.at("last_optimizer_step").get<int64_t>();
      }
    }
    for (const nlohmann::json& saved : leases) {
      core::TrainerLease lease;
      lease.id = saved.at("id").get<std::string>();
      lease.model = saved.at("model").get<std::string>();
      lease.incarnation = saved.at("incarnation").get<std::string>();
      lease.ranks = saved.at("ranks").get<std::vector<int>>();
      lease.ttl = absl::Milliseconds(saved.at("lease_ms").get<int64_t>());
      lease.expires = now + lease.ttl;
      absl::StatusOr<std::shared_ptr<ModelEntry>> model =
          registry_->Find(lease.model);
      const int world =
          model.ok() ? (*model)->spec.groups.topology.world_size() : 0;
      if (lease.ranks.empty() ||
          std::any_of(lease.ranks.begin(), lease.ranks.end(),
                      [&](int rank) { return rank < 0 || rank >= world; })) {
        continue;
      }
      std::sort(lease.ranks.begin(), lease.ranks.end());
      spdlog::info("trainer lease recovered model={} incarnation={} lease={}",
                   lease.model, lease.incarnation, lease.id);
      // The trainer stepped on while this daemon was down.
      MarkUnknown(lease, "summond restarted");
      leases_[lease.id] = std::move(lease);
    }
    for (const nlohmann::json& saved : events) {
      last_event_[{saved.at("model").get<std::string>(),
                   saved.at("rank").get<int>()}] =
          saved.at("event").get<std::string>();
    }
  } catch (const nlohmann::json::exception& error) {
    spdlog::error("{} is malformed ({}); trainer state partly recovered",
                  path.string(), error.what());
  }
  return absl::OkStatus();
}

}  // namespace summon::server
