#include "server/watch/watch_store.h"

#include <fnmatch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
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

}  // namespace

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
      entry.spec.model = json.at("model").get<std::string>();
      entry.spec.globs = json.at("globs").get<std::vector<std::string>>();
      entry.spec.every = json.at("every").get<int>();
      entry.spec.bins = json.at("bins").get<int>();
      entry.spec.grads = json.at("grads").get<bool>();
      entry.spec.watched = json.at("watched").get<std::vector<std::string>>();
      entry.spec.created_by = json.at("created_by").get<std::string>();
      entry.spec.created_at =
          absl::FromUnixMillis(json.at("created_at_unix_ms").get<int64_t>());
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
  if (data_dir_.empty()) return absl::OkStatus();
  Json histories = Json::array();
  for (const auto& [key, history] : entry.histories) {
    Json records = Json::array();
    for (const WatchRecord& record : history.records) {
      records.push_back(RecordToJson(record));
    }
    histories.push_back(
        {{"param", key.first},
         {"grad", key.second},
         {"first_nonfinite_step", history.first_nonfinite_step.has_value()
                                      ? Json(*history.first_nonfinite_step)
                                      : Json(nullptr)},
         {"records", std::move(records)}});
  }
  const WatchSpec& spec = entry.spec;
  const Json json = {
      {"model", spec.model},
      {"globs", spec.globs},
      {"every", spec.every},
      {"bins", spec.bins},
      {"grads", spec.grads},
      {"watched", spec.watched},
      {"created_by", spec.created_by},
      {"created_at_unix_ms", absl::ToUnixMillis(spec.created_at)},
      {"last_step",
       entry.last_step.has_value() ? Json(*entry.last_step) : Json(nullptr)},
      {"histories", std::move(histories)}};
  std::error_code error;
  fs::create_directories(fs::path(data_dir_) / "watches", error);
  const std::string path = PathOf(spec.model);
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

absl::Status WatchStore::Add(WatchSpec spec) {
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[spec.model];
  entry = Entry{};
  entry.spec = std::move(spec);
  return Persist(entry);
}

absl::Status WatchStore::Remove(const std::string& model) {
  absl::MutexLock lock(&mu_);
  if (entries_.erase(model) == 0) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' has no watch"));
  }
  if (!data_dir_.empty()) {
    std::error_code error;
    fs::remove(PathOf(model), error);
  }
  return absl::OkStatus();
}

void WatchStore::Forget(const std::string& model) { Remove(model).IgnoreError(); }

std::vector<WatchInfo> WatchStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<WatchInfo> infos;
  for (const auto& [model, entry] : entries_) {
    infos.push_back(WatchInfo{entry.spec, entry.last_step});
  }
  return infos;
}

std::optional<WatchSpec> WatchStore::Get(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto found = entries_.find(model);
  if (found == entries_.end()) return std::nullopt;
  return found->second.spec;
}

absl::StatusOr<WatchHistory> WatchStore::Show(const std::string& model,
                                              const std::string& param,
                                              bool grad, int64_t since) const {
  absl::MutexLock lock(&mu_);
  auto found = entries_.find(model);
  if (found == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' has no watch"));
  }
  const Entry& entry = found->second;
  const std::vector<std::string>& watched = entry.spec.watched;
  if (std::find(watched.begin(), watched.end(), param) == watched.end() ||
      (grad && !entry.spec.grads)) {
    return absl::NotFoundError(absl::StrCat(
        "the watch of model '", model, "' does not record ",
        grad ? "the gradient of " : "", "parameter '", param, "'"));
  }
  WatchHistory shown;
  auto history = entry.histories.find({param, grad});
  if (history == entry.histories.end()) return shown;
  shown.first_nonfinite_step = history->second.first_nonfinite_step;
  for (const WatchRecord& record : history->second.records) {
    if (record.step >= since) shown.records.push_back(record);
  }
  return shown;
}

std::optional<core::HistogramRange> WatchStore::NextRange(
    const std::string& model, const std::string& param, bool grad) const {
  absl::MutexLock lock(&mu_);
  auto found = entries_.find(model);
  if (found == entries_.end()) return std::nullopt;
  auto history = found->second.histories.find({param, grad});
  if (history == found->second.histories.end() ||
      history->second.records.empty()) {
    return std::nullopt;
  }
  return core::NextHistogramRange(history->second.records.back().stats);
}

absl::StatusOr<WatchStore::Recorded> WatchStore::Record(
    const std::string& model, absl::Time created_at,
    std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>>
        records) {
  absl::MutexLock lock(&mu_);
  Recorded recorded;
  auto found = entries_.find(model);
  if (found == entries_.end() || found->second.spec.created_at != created_at) {
    return recorded;
  }
  Entry& entry = found->second;
  for (auto& [key, record] : records) {
    WatchHistory& history = entry.histories[key];
    if (HasNonFinite(record) && !history.first_nonfinite_step.has_value()) {
      history.first_nonfinite_step = record.step;
      recorded.first_nonfinite.push_back(key);
    }
    entry.last_step = record.step;
    history.records.push_back(std::move(record));
    while (static_cast<int>(history.records.size()) > history_) {
      history.records.pop_front();
    }
  }
  if (absl::Status persisted = Persist(entry); !persisted.ok()) {
    return persisted;
  }
  return recorded;
}

}  // namespace summon::server
