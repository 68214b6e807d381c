#include "server/watch/watch_replication.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace summon::server {

void WatchReplication::PushModelTo(int node, const std::string& model) {
  for (const WatchChunk& chunk : store_->Export(model, kChunkBytes)) {
    if (absl::Status applied = replicas_->Apply(node, chunk); !applied.ok()) {
      spdlog::warn("watch of model {} not sent to node {}: {}", model, node,
                   applied.ToString());
      return;
    }
  }
}

void WatchReplication::PushModel(const std::string& model) {
  absl::MutexLock lock(&mu_);
  for (int node : replicas_->Followers()) PushModelTo(node, model);
}

void WatchReplication::PushRecord(const WatchChunk& chunk) {
  absl::MutexLock lock(&mu_);
  for (int node : replicas_->Followers()) {
    const absl::Status applied = replicas_->Apply(node, chunk);
    if (absl::IsFailedPrecondition(applied)) {
      // Behind (it missed a step or the watch): the whole watch instead.
      PushModelTo(node, chunk.model);
    } else if (!applied.ok()) {
      spdlog::warn("watch record of model {} not sent to node {}: {}",
                   chunk.model, node, applied.ToString());
    }
  }
}

absl::Status WatchReplication::Sync() {
  absl::MutexLock lock(&mu_);
  // Model -> the newest version and the node holding it (-1: this one,
  // which wins ties).
  std::map<std::string, std::pair<WatchVersion, int>> newest;
  for (const WatchVersion& version : store_->Versions()) {
    newest[version.model] = {version, -1};
  }
  std::map<int, std::map<std::string, WatchVersion>> held;
  std::vector<int> failed;
  for (int node : replicas_->Followers()) {
    absl::StatusOr<std::vector<WatchVersion>> versions =
        replicas_->Versions(node);
    if (!versions.ok()) {
      spdlog::warn("watches of node {} not compared: {}", node,
                   versions.status().ToString());
      failed.push_back(node);
      continue;
    }
    std::map<std::string, WatchVersion>& mine = held[node];
    for (WatchVersion& version : *versions) {
      auto [at, added] =
          newest.try_emplace(version.model, std::make_pair(version, node));
      if (!added && version.NewerThan(at->second.first)) {
        at->second = {version, node};
      }
      mine[version.model] = std::move(version);
    }
  }
  for (const auto& [model, best] : newest) {
    if (best.second < 0) continue;
    absl::StatusOr<std::vector<WatchChunk>> chunks =
        replicas_->Fetch(best.second, model);
    absl::Status adopted = chunks.status();
    for (size_t i = 0; adopted.ok() && i < chunks->size(); ++i) {
      adopted = store_->Apply((*chunks)[i]);
    }
    if (!adopted.ok()) {
      spdlog::warn("watch of model {} not taken from node {}: {}", model,
                   best.second, adopted.ToString());
      continue;
    }
    spdlog::info("watch of model {} taken from node {} (step {})", model,
                 best.second, best.first.last_step);
  }
  std::map<std::string, WatchVersion> leader;
  for (WatchVersion& version : store_->Versions()) {
    leader[version.model] = std::move(version);
  }
  for (const auto& [node, versions] : held) {
    for (const auto& [model, version] : leader) {
      auto theirs = versions.find(model);
      if (theirs == versions.end() || theirs->second != version) {
        PushModelTo(node, model);
      }
    }
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "watches not synced with node(s) ", absl::StrJoin(failed, ", ")));
}

}  // namespace summon::server
