// WatchStore's files: <data-dir>/watches/<model>.json per model, read at
// start (Load) and rewritten under a temporary name after each change
// (Persist); and the JSON form of specs and records they hold.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/watch/watch_store.h"
#include "server/watch/watch_store_internal.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace watch_json {
namespace {

// JSON has no NaN: a statistic of no finite element is stored as null.
Json Number(double value) {
  return std::isfinite(value) ? Json(value) : Json(nullptr);
}
double NumberOf(const Json& value) {
  return value.is_number() ? value.get<double>()
                           : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

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

}  // namespace watch_json

namespace {

namespace fs = std::filesystem;
using watch_json::Json;
using watch_json::OptionalStep;
using watch_json::RecordFromJson;
using watch_json::RecordToJson;
using watch_json::SpecFromJson;
using watch_json::SpecToJson;

}  // namespace

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

}  // namespace summon::server
