// The models file of the data dir: one small JSON record per model
// (<data-dir>/models/<name>.json: name, layout, strategy, topology, which
// ranks hold gradients, init external) written on every change and read by
// a restarted daemon to re-attach the models' shards. Apart from
// model_registry.cc because it is the registry's only persistence; the
// shards themselves persist in shared memory (server/store/).
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/model/model_registry.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::Status ModelRegistry::Persist(ModelEntry& model) const {
  if (options_.data_dir.empty()) return absl::OkStatus();
  std::error_code error;
  const fs::path dir = fs::path(options_.data_dir) / "models";
  fs::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", error.message()));
  }
  absl::MutexLock runtime_lock(&model.runtime_mu);
  nlohmann::json record = {
      {"name", model.name},
      {"layout_json", model.layout_json},
      {"strategy", std::string(core::StrategyName(model.spec.groups.declared))},
      {"nodes", options_.topology.nodes},
      {"local_ranks", options_.topology.local_ranks},
      {"grads_by_rank", model.grads_by_rank},
      {"awaiting_init", model.awaiting_init},
  };
  const fs::path final_path = dir / (model.name + ".json");
  const fs::path temp_path = dir / (model.name + ".json.tmp");
  {
    std::ofstream out(temp_path, std::ios::trunc);
    out << record.dump(2) << "\n";
    if (!out) {
      return absl::InternalError(
          absl::StrCat("cannot write ", temp_path.string()));
    }
  }
  fs::rename(temp_path, final_path, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot rename to ", final_path.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status ModelRegistry::Recover() {
  if (options_.data_dir.empty()) return absl::OkStatus();
  const fs::path dir = fs::path(options_.data_dir) / "models";
  std::error_code error;
  if (!fs::exists(dir, error)) return absl::OkStatus();
  for (const fs::directory_entry& file : fs::directory_iterator(dir, error)) {
    if (file.path().extension() != ".json") continue;
    std::ifstream in(file.path());
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json record =
        nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object() ||
        !record.contains("name") || !record["name"].is_string() ||
        !record.contains("layout_json") || !record["layout_json"].is_string() ||
        !record.contains("strategy") || !record["strategy"].is_string()) {
      spdlog::error("model record {} is malformed; skipped",
                    file.path().string());
      continue;
    }
    absl::StatusOr<core::Strategy> strategy =
        core::ParseStrategy(record["strategy"].get<std::string>());
    const std::string name = record["name"].get<std::string>();
    const std::string layout = record["layout_json"].get<std::string>();
    absl::StatusOr<std::shared_ptr<ModelEntry>> model =
        strategy.ok()
            ? Build(name, layout, *strategy, AttachMode::kAttach)
            : absl::StatusOr<std::shared_ptr<ModelEntry>>(strategy.status());
    if (!model.ok() && strategy.ok() &&
        (model.status().code() == absl::StatusCode::kNotFound ||
         model.status().code() == absl::StatusCode::kFailedPrecondition)) {
      // Its shards are gone (a client unlinked a segment, or the host
      // rebooted): keep the model visible as MISSING_SHARDS so its users
      // learn what happened and can reload or delete it.
      spdlog::error(
          "model {} is MISSING_SHARDS: {}; recover with `summonctl model load "
          "{} --from CHECKPOINT` or `summonctl model delete {}`",
          name, std::string(model.status().message()), name, name);
      model = BuildMissing(name, layout, *strategy, model.status());
    }
    if (!model.ok()) {
      spdlog::error("model {} not re-attached: {}", name,
                    model.status().ToString());
      continue;
    }
    if (record.contains("awaiting_init") &&
        record["awaiting_init"].is_boolean()) {
      absl::MutexLock runtime_lock(&(*model)->runtime_mu);
      (*model)->awaiting_init = record["awaiting_init"].get<bool>();
    }
    if (record.contains("grads_by_rank") &&
        record["grads_by_rank"].is_array() &&
        record["grads_by_rank"].size() == (*model)->grads_by_rank.size()) {
      for (size_t rank = 0; rank < record["grads_by_rank"].size(); ++rank) {
        const auto& flag = record["grads_by_rank"][rank];
        (*model)->grads_by_rank[rank] = flag.is_boolean() && flag.get<bool>();
      }
    }
    absl::MutexLock lock(&mu_);
    models_[name] = *model;
    spdlog::info("model reattach name={} units={}", name,
                 (*model)->spec.units.size());
  }
  return absl::OkStatus();
}

}  // namespace summon::server
