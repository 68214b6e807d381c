// WatchStore's replication: the versions nodes compare, a watch exported
// as chunks and chunks applied from another node (watch_replication.h
// drives them).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/watch/watch_store.h"
#include "server/watch/watch_store_internal.h"

namespace summon::server {
namespace {

using watch_json::Json;
using watch_json::Millis;
using watch_json::OptionalStep;
using watch_json::RecordFromJson;
using watch_json::RecordToJson;
using watch_json::SpecFromJson;
using watch_json::SpecToJson;

// The model's file names it: a model name is one path component already
// (segment_names' rule), this keeps a malformed chunk from naming another.
bool SafeModelName(const std::string& model) {
  return !model.empty() && model != "." && model != ".." &&
         model.find('/') == std::string::npos &&
         model.find('\0') == std::string::npos;
}

}  // namespace

bool WatchVersion::NewerThan(const WatchVersion& other) const {
  if (created_at != other.created_at) return created_at > other.created_at;
  if (removed != other.removed) return removed;
  return !removed && last_step > other.last_step;
}

bool WatchVersion::operator==(const WatchVersion& other) const {
  return model == other.model && created_at == other.created_at &&
         removed == other.removed && (removed || last_step == other.last_step);
}

std::vector<WatchVersion> WatchStore::Versions() const {
  absl::MutexLock lock(&mu_);
  std::vector<WatchVersion> versions;
  for (const auto& [model, entry] : entries_) {
    if (!entry.complete) continue;
    versions.push_back(WatchVersion{model, entry.spec.created_at,
                                    entry.removed,
                                    entry.last_step.value_or(-1)});
  }
  return versions;
}

std::vector<WatchChunk> WatchStore::Export(const std::string& model,
                                           size_t max_bytes) const {
  absl::MutexLock lock(&mu_);
  std::vector<WatchChunk> chunks;
  auto found = entries_.find(model);
  if (found == entries_.end() || !found->second.complete) return chunks;
  const Entry& entry = found->second;
  const auto chunk_of = [&](WatchChunk::Kind kind) {
    WatchChunk chunk;
    chunk.kind = kind;
    chunk.model = model;
    chunk.created_at = entry.spec.created_at;
    return chunk;
  };
  if (entry.removed) {
    chunks.push_back(chunk_of(WatchChunk::Kind::kRemove));
    return chunks;
  }
  chunks.push_back(chunk_of(WatchChunk::Kind::kReplace));
  chunks.back().json = SpecToJson(entry.spec).dump();
  // Records in pieces of about max_bytes: a ring of K records with many
  // bins is far more than one gRPC message may carry.
  Json histories = Json::array();
  size_t bytes = 0;
  const auto flush = [&] {
    if (histories.empty()) return;
    chunks.push_back(chunk_of(WatchChunk::Kind::kAppend));
    chunks.back().json = Json{{"histories", std::move(histories)}}.dump();
    histories = Json::array();
    bytes = 0;
  };
  for (const auto& [key, history] : entry.histories) {
    Json piece = {
        {"param", key.first},
        {"grad", key.second},
        {"first_nonfinite_step", OptionalStep(history.first_nonfinite_step)},
        {"records", Json::array()}};
    for (const WatchRecord& record : history.records) {
      Json json = RecordToJson(record);
      bytes += json.dump().size();
      piece["records"].push_back(std::move(json));
      if (bytes >= max_bytes) {
        histories.push_back(piece);
        piece["records"] = Json::array();
        flush();
      }
    }
    histories.push_back(std::move(piece));
  }
  flush();
  chunks.push_back(chunk_of(WatchChunk::Kind::kCommit));
  chunks.back().previous_step = entry.last_step.value_or(-1);
  return chunks;
}

absl::Status WatchStore::Apply(const WatchChunk& chunk) {
  absl::MutexLock lock(&mu_);
  try {
    return ApplyLocked(chunk);
  } catch (const std::exception& failure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed watch chunk for model '", chunk.model, "': ",
        failure.what()));
  }
}

absl::Status WatchStore::ApplyLocked(const WatchChunk& chunk) {
  using Kind = WatchChunk::Kind;
  if (!SafeModelName(chunk.model)) {
    return absl::InvalidArgumentError(
        absl::StrCat("watch chunk names no valid model: '", chunk.model, "'"));
  }
  const absl::Time created_at = Millis(chunk.created_at);
  auto found = entries_.find(chunk.model);
  Entry* entry = found == entries_.end() ? nullptr : &found->second;
  const auto not_following = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "watch chunk for model '", chunk.model, "' does not follow: ", what));
  };
  if (chunk.kind == Kind::kReplace || chunk.kind == Kind::kRemove) {
    Entry fresh;
    fresh.spec.model = chunk.model;
    fresh.spec.created_at = created_at;
    if (chunk.kind == Kind::kRemove) {
      fresh.removed = true;
    } else {
      const Json json = Json::parse(chunk.json);
      fresh.spec = SpecFromJson(json);
      fresh.spec.created_at = created_at;
      fresh.spec.model = chunk.model;
      fresh.complete = false;
    }
    entries_[chunk.model] = std::move(fresh);
    return Persist(entries_[chunk.model]);
  }
  if (entry == nullptr || entry->removed ||
      entry->spec.created_at != created_at) {
    return not_following("this node holds another watch of it (or none)");
  }
  if (chunk.kind == Kind::kCommit) {
    if (entry->complete) return not_following("already complete");
    entry->complete = true;
    if (chunk.previous_step >= 0) entry->last_step = chunk.previous_step;
    return Persist(*entry);
  }
  if (chunk.kind != Kind::kAppend && chunk.kind != Kind::kRecord) {
    return absl::InvalidArgumentError("unknown watch chunk kind");
  }
  if (chunk.kind == Kind::kAppend && entry->complete) {
    return not_following("records appended to a complete watch");
  }
  if (chunk.kind == Kind::kRecord &&
      (!entry->complete ||
       entry->last_step.value_or(-1) != chunk.previous_step)) {
    return not_following(absl::StrCat(
        "it records on top of step ", chunk.previous_step, ", this node has ",
        entry->last_step.value_or(-1)));
  }
  const Json json = Json::parse(chunk.json);
  Records records;
  for (const Json& history : json.at("histories")) {
    const std::pair<std::string, bool> key = {
        history.at("param").get<std::string>(), history.at("grad").get<bool>()};
    if (chunk.kind == Kind::kAppend) {
      WatchHistory& ring = entry->histories[key];
      if (history.contains("first_nonfinite_step") &&
          !history.at("first_nonfinite_step").is_null()) {
        ring.first_nonfinite_step =
            history.at("first_nonfinite_step").get<int64_t>();
      }
    }
    for (const Json& record : history.at("records")) {
      records.push_back({key, RecordFromJson(record)});
    }
  }
  AppendLocked(*entry, std::move(records));
  return Persist(*entry);
}

}  // namespace summon::server
