#include "server/watch/watch_store.h"

#include <fnmatch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// JSON has no NaN: a statistic of no finite element is stored as null.
Json Number(double value) {
  return std::isfinite(value) ? Json(value) : Json(nullptr);
}
double NumberOf(const Json& value) {
  return value.is_number() ? value.get<double>()
                           : std::numeric_limits<double>::quiet_NaN();
}

Json RecordToJson(const WatchRecord& record) {
  const core::WatchStatistics& s = record.stats;
  Json json = {{"step", record.step},
               {"recorded_at_unix_ms", absl::ToUnixMillis(record.recorded_at)},
               {"latency_us", absl::ToInt64Microseconds(record.latency)},
               {"numel", s.numel},
               {"nan", s.nan_count},
               {"inf", s.inf_count},
               {"l2_norm", Number(s.l2_norm)},
               {"mean", Number(s.mean)},
               {"min", Number(s.min)},
               {"max", Number(s.max)},
               {"abs_max", Number(s.abs_max)},
               {"histogram", s.histogram},
               {"below", s.below_range},
               {"above", s.above_range}};
  if (s.range.has_value()) {
    json["lower"] = s.range->lower;
    json["upper"] = s.range->upper;
  }
  return json;
}

WatchRecord RecordFromJson(const Json& json) {
  WatchRecord record;
  record.step = json.at("step").get<int64_t>();
  record.recorded_at =
      absl::FromUnixMillis(json.at("recorded_at_unix_ms").get<int64_t>());
  record.latency = absl::Microseconds(json.at("latency_us").get<int64_t>());
  core::WatchStatistics& s = record.stats;
  s.numel = json.at("numel").get<int64_t>();
  s.nan_count = json.at("nan").get<int64_t>();
  s.inf_count = json.at("inf").get<int64_t>();
  s.l2_norm = NumberOf(json.at("l2_norm"));
  s.mean = NumberOf(json.at("mean"));
  s.min = NumberOf(json.at("min"));
  s.max = NumberOf(json.at("max"));
  s.abs_max = NumberOf(json.at("abs_max"));
  s.histogram = json.at("histogram").get<std::vector<int64_t>>();
  s.below_range = json.at("below").get<int64_t>();
  s.above_range = json.at("above").get<int64_t>();
  if (json.contains("lower")) {
    s.range = core::HistogramRange{json.at("lower").get<double>(),
                                   json.at("upper").get<double>()};
  }
  return record;
}

bool HasNonFinite(const WatchRecord& record) {
  return record.stats.nan_count > 0 || record.stats.inf_count > 0;
}

Json SpecToJson(const WatchSpec& spec) {
  return {{"model", spec.model},
          {"globs", spec.globs},
          {"every", spec.every},
          {"bins", spec.bins},
          {"grads", spec.grads},
          {"watched", spec.watched},
          {"created_by", spec.created_by},
          {"created_at_unix_ms", absl::ToUnixMillis(spec.created_at)}};
}

WatchSpec SpecFromJson(const Json& json) {
  WatchSpec spec;
  spec.model = json.at("model").get<std::string>();
  spec.globs = json.at("globs").get<std::vector<std::string>>();
  spec.every = json.at("every").get<int>();
  spec.bins = json.at("bins").get<int>();
  spec.grads = json.at("grads").get<bool>();
  spec.watched = json.at("watched").get<std::vector<std::string>>();
  spec.created_by = json.at("created_by").get<std::string>();
  spec.created_at =
      absl::FromUnixMillis(json.at("created_at_unix_ms").get<int64_t>());
  return spec;
}

Json OptionalStep(const std::optional<int64_t>& step) {
  return step.has_value() ? Json(*step) : Json(nullptr);
}

// What each node keeps: whole milliseconds, so every copy compares equal.
absl::Time Millis(absl::Time time) {
  return absl::FromUnixMillis(absl::ToUnixMillis(time));
}

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

bool WatchGlobMatches(const std::string& glob, const std::string& fqn) {
  return fnmatch(glob.c_str(), fqn.c_str(), 0) == 0;
}

WatchStore::WatchStore(std::string data_dir, int history)
    : data_dir_(std::move(data_dir)), history_(std::max(history, 1)) {}

std::string WatchStore::PathOf(const std::string& model) const {
  return (fs::path(data_dir_) / "watches" / (model + ".json")).string();
}

absl::Status WatchStore::Load() {
  if (data_dir_.empty()) return absl::OkStatus();
  const fs::path dir = fs::path(data_dir_) / "watches";
  std::error_code error;
  if (!fs::exists(dir, error)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  for (const fs::directory_entry& file : fs::directory_iterator(dir, error)) {
    if (file.path().extension() != ".json") continue;
    std::ifstream in(file.path());
    std::stringstream text;
    text << in.rdbuf();
    const Json json = Json::parse(text.str(), nullptr, false);
    try {
      if (json.is_discarded()) throw std::runtime_error("not JSON");
      Entry entry;
      if (json.value("removed", false)) {
        entry.removed = true;
        entry.spec.model = json.at("model").get<std::string>();
        entry.spec.created_at =
            absl::FromUnixMillis(json.at("created_at_unix_ms").get<int64_t>());
      } else {
        entry.spec = SpecFromJson(json);
        if (!json.at("last_step").is_null()) {
          entry.last_step = json.at("last_step").get<int64_t>();
        }
        for (const Json& history : json.at("histories")) {
          WatchHistory& ring =
              entry.histories[{history.at("param").get<std::string>(),
                               history.at("grad").get<bool>()}];
          if (!history.at("first_nonfinite_step").is_null()) {
            ring.first_nonfinite_step =
                history.at("first_nonfinite_step").get<int64_t>();
          }
          for (const Json& record : history.at("records")) {
            ring.records.push_back(RecordFromJson(record));
          }
          // A smaller --watch-history than the last run's keeps the newest.
          while (static_cast<int>(ring.records.size()) > history_) {
            ring.records.pop_front();
          }
        }
      }
      const std::string model = entry.spec.model;
      entries_[model] = std::move(entry);
    } catch (const std::exception& failure) {
      spdlog::error("watch file {} is malformed ({}); skipped",
                    file.path().string(), failure.what());
    }
  }
  return absl::OkStatus();
}

absl::Status WatchStore::Persist(const Entry& entry) const {
  if (data_dir_.empty() || !entry.complete) return absl::OkStatus();
  Json json;
  if (entry.removed) {
    json = {{"model", entry.spec.model},
            {"created_at_unix_ms", absl::ToUnixMillis(entry.spec.created_at)},
            {"removed", true}};
  } else {
    Json histories = Json::array();
    for (const auto& [key, history] : entry.histories) {
      Json records = Json::array();
      for (const WatchRecord& record : history.records) {
        records.push_back(RecordToJson(record));
      }
      histories.push_back(
          {{"param", key.first},
           {"grad", key.second},
           {"first_nonfinite_step", OptionalStep(history.first_nonfinite_step)},
           {"records", std::move(records)}});
    }
    json = SpecToJson(entry.spec);
    json["last_step"] = OptionalStep(entry.last_step);
    json["histories"] = std::move(histories);
  }
  std::error_code error;
  fs::create_directories(fs::path(data_dir_) / "watches", error);
  const std::string path = PathOf(entry.spec.model);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << json.dump() << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  // Renamed into place: a crash leaves the old file or the new, never half.
  fs::rename(temp, path, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp, ": ", error.message()));
  }
  return absl::OkStatus();
}

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
