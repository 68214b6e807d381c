// The models file of the data dir: one small JSON record per model
// (<data-dir>/models/<name>.json: name, layout, strategy, topology, which
// ranks hold gradients, init external) written on every change and read by
// a restarted daemon to re-attach the models' shards. On a cluster with a
// coordinator the same record is published there first (RecordHook) and
// reconciled from there (Reconcile), so a node that lost its data dir gets
// it back. Apart from model_registry.cc because it is the registry's only
// persistence; the shards themselves persist in shared memory
// (server/store/), named after the data dir's path, not its contents.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
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

nlohmann::json ParseRecord(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

bool IsTombstone(const nlohmann::json& record) {
  return record.is_object() && record.contains("deleted") &&
         record["deleted"].is_boolean() && record["deleted"].get<bool>();
}

// The record's init external and gradient ranks onto `model`.
void ApplyFlags(const nlohmann::json& record, ModelEntry& model) {
  if (record.contains("awaiting_init") &&
      record["awaiting_init"].is_boolean()) {
    absl::MutexLock runtime_lock(&model.runtime_mu);
    model.awaiting_init = record["awaiting_init"].get<bool>();
  }
  if (record.contains("grads_by_rank") && record["grads_by_rank"].is_array() &&
      record["grads_by_rank"].size() == model.grads_by_rank.size()) {
    for (size_t rank = 0; rank < record["grads_by_rank"].size(); ++rank) {
      const auto& flag = record["grads_by_rank"][rank];
      model.grads_by_rank[rank] = flag.is_boolean() && flag.get<bool>();
    }
  }
}

}  // namespace

std::string ModelRegistry::Tombstone(const std::string& name) {
  return nlohmann::json({{"name", name}, {"deleted", true}}).dump();
}

absl::Status ModelRegistry::Persist(ModelEntry& model, bool publish) const {
  if (options_.data_dir.empty() && !(publish && record_hook_)) {
    return absl::OkStatus();
  }
  nlohmann::json record;
  {
    absl::MutexLock runtime_lock(&model.runtime_mu);
    record = {
        {"name", model.name},
        {"layout_json", model.layout_json},
        {"strategy",
         std::string(core::StrategyName(model.spec.groups.declared))},
        {"nodes", options_.topology.nodes},
        {"local_ranks", options_.topology.local_ranks},
        {"grads_by_rank", model.grads_by_rank},
        {"awaiting_init", model.awaiting_init},
    };
  }
  // The coordinator's record first: a change it refused (no quorum, a
  // deposed epoch) is not made here either.
  if (publish && record_hook_) {
    if (absl::Status published = record_hook_(model.name, record.dump());
        !published.ok()) {
      return published;
    }
  }
  if (options_.data_dir.empty()) return absl::OkStatus();
  std::error_code error;
  const fs::path dir = fs::path(options_.data_dir) / "models";
  fs::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", error.message()));
  }
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

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::FromRecord(
    const std::string& text, const std::string& source) {
  nlohmann::json record = ParseRecord(text);
  if (record.is_discarded() || !record.is_object() ||
      !record.contains("name") || !record["name"].is_string() ||
      !record.contains("layout_json") || !record["layout_json"].is_string() ||
      !record.contains("strategy") || !record["strategy"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model record ", source, " is malformed"));
  }
  absl::StatusOr<core::Strategy> strategy =
      core::ParseStrategy(record["strategy"].get<std::string>());
  if (!strategy.ok()) return strategy.status();
  const std::string name = record["name"].get<std::string>();
  const std::string layout = record["layout_json"].get<std::string>();
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      Build(name, layout, *strategy, AttachMode::kAttach);
  if (!model.ok() &&
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
  if (!model.ok()) return model.status();
  ApplyFlags(record, **model);
  return model;
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
    absl::StatusOr<std::shared_ptr<ModelEntry>> model =
        FromRecord(text.str(), file.path().string());
    if (!model.ok()) {
      spdlog::error("model record {} not re-attached: {}", file.path().string(),
                    model.status().ToString());
      continue;
    }
    absl::MutexLock lock(&mu_);
    models_[(*model)->name] = *model;
    spdlog::info("model reattach name={} units={}", (*model)->name,
                 (*model)->spec.units.size());
  }
  return absl::OkStatus();
}

void ModelRegistry::Reconcile(
    const std::map<std::string, std::string>& records) {
  for (const auto& [name, text] : records) {
    const nlohmann::json record = ParseRecord(text);
    absl::StatusOr<std::shared_ptr<ModelEntry>> local = Find(name);
    if (IsTombstone(record)) {
      if (!local.ok()) continue;
      // Deleted while this node was away (or before its delete reached
      // it): its shards go too.
      const absl::Status removed = RemoveLocal(name, /*publish=*/false);
      spdlog::warn("model {}: deleted in the cluster's records; removed here{}",
                   name, removed.ok() ? "" : ": " + removed.ToString());
      continue;
    }
    if (record.is_discarded() || !record.is_object() ||
        !record.contains("layout_json") || !record["layout_json"].is_string() ||
        !record.contains("strategy") || !record["strategy"].is_string() ||
        !record.contains("name") || record["name"] != name) {
      spdlog::error("model {}: the cluster's record is malformed; left", name);
      continue;
    }
    if (local.ok() &&
        ((*local)->layout_json != record["layout_json"].get<std::string>() ||
         core::StrategyName((*local)->spec.groups.declared) !=
             record["strategy"].get<std::string>())) {
      // Deleted and created again while this node was away: the shards
      // here are the old model's.
      if (absl::Status removed = RemoveLocal(name, /*publish=*/false);
          !removed.ok()) {
        spdlog::error(
            "model {}: recorded with another layout, not replaced: {}", name,
            removed.ToString());
        continue;
      }
      local = core::UnknownModelError(name);
    }
    std::shared_ptr<ModelEntry> entry;
    if (local.ok()) {
      // The same model: its flags (init external ended) are the record's.
      entry = *local;
      ApplyFlags(record, *entry);
    } else {
      absl::StatusOr<std::shared_ptr<ModelEntry>> adopted =
          FromRecord(text, absl::StrCat("of model ", name, " (coordinator)"));
      if (!adopted.ok()) {
        spdlog::error("model {}: not re-attached from the cluster's record: {}",
                      name, adopted.status().ToString());
        continue;
      }
      entry = *adopted;
      spdlog::warn("model {}: restored from the cluster's record ({})", name,
                   entry->store == nullptr ? "its shards are missing"
                                           : "its shards re-attached");
    }
    // The data dir holds it again (a lost one is rebuilt).
    if (absl::Status persisted = Persist(*entry, /*publish=*/false);
        !persisted.ok()) {
      spdlog::error("model {}: record not written: {}", name,
                    persisted.ToString());
    }
    absl::MutexLock lock(&mu_);
    models_[name] = entry;
  }
  // A node about to lead kept its units' generations as the previous
  // leader last told it; every COMMIT and load also moved them in this
  // node's shard headers, which are never behind (generations only move
  // forward).
  for (const std::shared_ptr<ModelEntry>& model : List()) {
    if (model->store == nullptr) continue;
    absl::MutexLock runtime_lock(&model->runtime_mu);
    for (size_t u = 0; u < model->runtime.units.size(); ++u) {
      uint64_t& generation = model->runtime.units[u].generation;
      generation =
          std::max(generation, model->store->Generation(static_cast<int>(u)));
    }
  }
}

}  // namespace summon::server
