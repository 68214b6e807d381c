// WatchStore: the watches and their rings of records (add, remove, show,
// record a step). Their files are watch_store_files.cc, the chunks that
// copy them between nodes watch_store_replication.cc.
#include "server/watch/watch_store.h"

#include <fnmatch.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/watch/watch_store_internal.h"

namespace summon::server {
namespace {

using watch_json::Json;
using watch_json::Millis;
using watch_json::RecordToJson;

bool HasNonFinite(const WatchRecord& record) {
  return record.stats.nan_count > 0 || record.stats.inf_count > 0;
}

}  // namespace

bool WatchGlobMatches(const std::string& glob, const std::string& fqn) {
  return fnmatch(glob.c_str(), fqn.c_str(), 0) == 0;
}

WatchStore::WatchStore(std::string data_dir, int history)
    : data_dir_(std::move(data_dir)), history_(std::max(history, 1)) {}

const WatchStore::Entry* WatchStore::LiveLocked(
    const std::string& model) const {
  auto found = entries_.find(model);
  if (found == entries_.end() || found->second.removed ||
      !found->second.complete) {
    return nullptr;
  }
  return &found->second;
}

absl::Status WatchStore::Add(WatchSpec spec) {
  absl::MutexLock lock(&mu_);
  spec.created_at = Millis(spec.created_at);
  Entry& entry = entries_[spec.model];
  entry = Entry{};
  entry.spec = std::move(spec);
  return Persist(entry);
}

absl::Status WatchStore::Remove(const std::string& model) {
  absl::MutexLock lock(&mu_);
  auto found = entries_.find(model);
  if (found == entries_.end() || found->second.removed) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' has no watch"));
  }
  Entry tombstone;
  tombstone.removed = true;
  tombstone.spec.model = model;
  tombstone.spec.created_at = found->second.spec.created_at;
  found->second = std::move(tombstone);
  return Persist(found->second);
}

void WatchStore::Forget(const std::string& model) {
  Remove(model).IgnoreError();
}

std::vector<WatchInfo> WatchStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<WatchInfo> infos;
  for (const auto& [model, entry] : entries_) {
    if (entry.removed || !entry.complete) continue;
    infos.push_back(WatchInfo{entry.spec, entry.last_step});
  }
  return infos;
}

std::optional<WatchSpec> WatchStore::Get(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  const Entry* entry = LiveLocked(model);
  if (entry == nullptr) return std::nullopt;
  return entry->spec;
}

absl::StatusOr<WatchHistory> WatchStore::Show(const std::string& model,
                                              const std::string& param,
                                              bool grad, int64_t since) const {
  absl::MutexLock lock(&mu_);
  const Entry* entry = LiveLocked(model);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' has no watch"));
  }
  const std::vector<std::string>& watched = entry->spec.watched;
  if (std::find(watched.begin(), watched.end(), param) == watched.end() ||
      (grad && !entry->spec.grads)) {
    return absl::NotFoundError(absl::StrCat(
        "the watch of model '", model, "' does not record ",
        grad ? "the gradient of " : "", "parameter '", param, "'"));
  }
  WatchHistory shown;
  auto history = entry->histories.find({param, grad});
  if (history == entry->histories.end()) return shown;
  shown.first_nonfinite_step = history->second.first_nonfinite_step;
  for (const WatchRecord& record : history->second.records) {
    if (record.step >= since) shown.records.push_back(record);
  }
  return shown;
}

std::optional<core::HistogramRange> WatchStore::NextRange(
    const std::string& model, const std::string& param, bool grad) const {
  absl::MutexLock lock(&mu_);
  const Entry* entry = LiveLocked(model);
  if (entry == nullptr) return std::nullopt;
  auto history = entry->histories.find({param, grad});
  if (history == entry->histories.end() || history->second.records.empty()) {
    return std::nullopt;
  }
  return core::NextHistogramRange(history->second.records.back().stats);
}

std::vector<std::pair<std::string, bool>> WatchStore::AppendLocked(
    Entry& entry, Records records) {
  std::vector<std::pair<std::string, bool>> first_nonfinite;
  for (auto& [key, record] : records) {
    WatchHistory& history = entry.histories[key];
    if (HasNonFinite(record) && !history.first_nonfinite_step.has_value()) {
      history.first_nonfinite_step = record.step;
      first_nonfinite.push_back(key);
    }
    entry.last_step = record.step;
    history.records.push_back(std::move(record));
    while (static_cast<int>(history.records.size()) > history_) {
      history.records.pop_front();
    }
  }
  return first_nonfinite;
}

absl::StatusOr<WatchStore::Recorded> WatchStore::Record(
    const std::string& model, absl::Time created_at, Records records) {
  absl::MutexLock lock(&mu_);
  Recorded recorded;
  auto found = entries_.find(model);
  if (found == entries_.end() || found->second.removed ||
      !found->second.complete || found->second.spec.created_at != created_at) {
    return recorded;
  }
  Entry& entry = found->second;
  WatchChunk chunk;
  chunk.kind = WatchChunk::Kind::kRecord;
  chunk.model = model;
  chunk.created_at = created_at;
  chunk.previous_step = entry.last_step.value_or(-1);
  Json histories = Json::array();
  for (const auto& [key, record] : records) {
    histories.push_back({{"param", key.first},
                         {"grad", key.second},
                         {"records", Json::array({RecordToJson(record)})}});
  }
  chunk.json = Json{{"histories", std::move(histories)}}.dump();
  recorded.first_nonfinite = AppendLocked(entry, std::move(records));
  recorded.chunk = std::move(chunk);
  if (absl::Status persisted = Persist(entry); !persisted.ok()) {
    return persisted;
  }
  return recorded;
}
}  // namespace summon::server
