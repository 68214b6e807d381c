#include "server/model/model_registry.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/seeded_init.h"
#include "core/trainer_rules.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/checkpoint.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;

std::vector<int> LocalRanks(const core::Topology& topology, int node) {
  std::vector<int> ranks;
  for (int local = 0; local < topology.local_ranks; ++local) {
    ranks.push_back(node * topology.local_ranks + local);
  }
  return ranks;
}

// Writes each local rank's owned slices of every parameter from the seeded
// init, so no rank ever computes another rank's values.
absl::Status FillSeededShards(const ModelEntry& model,
                              const std::vector<int>& ranks, uint64_t seed,
                              bool grads) {
  absl::StatusOr<ShardStore::HostShards> shards =
      model.store->OnHost(grads, /*read=*/true);
  if (!shards.ok()) return shards.status();
  for (int rank : ranks) {
    const int position = model.spec.groups.PositionOf(rank);
    for (size_t u = 0; u < model.spec.units.size(); ++u) {
      const core::FlatParamLayout& layout = model.spec.units[u].layout;
      uint8_t* shard = shards->Shard(rank, static_cast<int>(u));
      const int64_t size =
          static_cast<int64_t>(core::ElementSize(layout.dtype()));
      for (size_t p = 0; p < layout.params().size(); ++p) {
        const core::ShardSlice slice =
            layout.SliceOf(static_cast<int>(p), position);
        if (!slice.in_shard) continue;
        const std::string& fqn = layout.params()[p].fqn;
        if (absl::Status status = core::FillSeeded(
                grads ? fqn + ".grad" : fqn, seed, layout.dtype(),
                slice.intra_start, slice.numel_in_shard,
                shard + slice.offset_in_shard * size);
            !status.ok()) {
          return status;
        }
      }
    }
  }
  return shards->Flush();
}

// Shards live in /dev/shm, which is RAM: a model whose local shards (with
// room for gradients and one writeback's staging) would not fit is refused
// before anything is allocated, instead of driving the host out of memory.
absl::Status CheckShardsFit(const ModelEntry& model) {
  int64_t shard_bytes = 0;
  for (const core::UnitSpec& unit : model.spec.units) {
    shard_bytes += unit.layout.shard_bytes();
  }
  const int64_t node_bytes =
      shard_bytes * static_cast<int64_t>(model.local_ranks.size());
  struct statvfs shm {};
  int64_t available = std::numeric_limits<int64_t>::max();
  if (statvfs("/dev/shm", &shm) == 0) {
    available =
        static_cast<int64_t>(shm.f_bavail) * static_cast<int64_t>(shm.f_frsize);
  }
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  if (memory > 0) available = std::min(available, memory / 2);
  if (node_bytes > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model '", model.name, "' needs ", node_bytes,
        " bytes of shards on this node but only ", available,
        " are available for them (/dev/shm free space, at most half the "
        "memory)"));
  }
  return absl::OkStatus();
}

uint64_t Fnv1a(const uint8_t* data, int64_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int64_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

namespace {

// Every rank IDLE, every unit at the store's generation (0 without one).
void InitRuntime(ModelEntry& model, int world_size) {
  absl::MutexLock lock(&model.runtime_mu);
  model.runtime.model = model.name;
  model.runtime.phase_per_rank.assign(world_size, core::TrainingPhase::kIdle);
  model.steps.assign(world_size, std::nullopt);
  model.optimizer_entries.assign(world_size, 0);
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    core::UnitRuntimeState unit;
    unit.fqn = model.spec.units[u].fqn;
    if (model.store != nullptr) {
      unit.generation = model.store->Generation(static_cast<int>(u));
    }
    model.runtime.units.push_back(std::move(unit));
  }
}

}  // namespace

ModelHealth HealthOf(ModelEntry& model, std::string* detail) {
  if (model.store == nullptr) {
    *detail = absl::StrCat(model.missing_detail,
                           "; recover with `summonctl model load ", model.name,
                           " --from CHECKPOINT` or `summonctl model delete ",
                           model.name, "`");
    return ModelHealth::kMissingShards;
  }
  {
    absl::MutexLock lock(&model.runtime_mu);
    if (model.awaiting_init) {
      *detail =
          "init external: the attached trainer fills the shards and calls "
          "Trainer.MarkInitialized";
      return ModelHealth::kAwaitingInit;
    }
  }
  const std::vector<std::string> unlinked = model.store->UnlinkedSegments();
  if (!unlinked.empty()) {
    *detail = absl::StrCat(
        "segment ", unlinked.front(),
        " was unlinked from /dev/shm by another process; its data lives only "
        "until this daemon exits: save the model now");
    return ModelHealth::kDegraded;
  }
  detail->clear();
  return ModelHealth::kReady;
}

std::string InstanceForDataDir(const std::string& data_dir) {
  if (data_dir.empty()) {
    // No data directory: nothing is meant to survive, so any unique name.
    std::random_device random;
    return absl::StrFormat("t%08x%04x", random(), getpid() & 0xffff);
  }
  std::error_code error;
  fs::path canonical = fs::weakly_canonical(data_dir, error);
  const std::string text = error ? data_dir : canonical.string();
  return absl::StrFormat("%012x", core::Fnv1a64(text) & 0xffffffffffffULL);
}

ModelRegistry::ModelRegistry(Options options) : options_(std::move(options)) {}

ModelRegistry::~ModelRegistry() {
  if (!options_.data_dir.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, model] : models_) {
    if (model->store == nullptr) continue;
    if (absl::Status status = model->store->Destroy(); !status.ok()) {
      spdlog::warn("model {}: shards not unlinked: {}", name,
                   status.ToString());
    }
  }
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::NewEntry(
    const std::string& name, const std::string& layout_json,
    std::optional<core::Strategy> strategy) const {
  if (absl::Status status = ValidateModelName(name); !status.ok()) {
    return status;
  }
  absl::StatusOr<core::ModelSpec> spec =
      core::ParseModelLayout(layout_json, options_.topology, strategy);
  if (!spec.ok()) return spec.status();
  auto model = std::make_shared<ModelEntry>();
  model->name = name;
  model->layout_json = layout_json;
  model->spec = *std::move(spec);
  model->local_ranks = LocalRanks(options_.topology, options_.node);
  model->grads_by_rank.assign(options_.topology.world_size(), false);
  return model;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Build(
    const std::string& name, const std::string& layout_json,
    std::optional<core::Strategy> strategy, AttachMode mode) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      NewEntry(name, layout_json, strategy);
  if (!model.ok()) return model.status();
  if (mode == AttachMode::kCreate) {
    if (absl::Status fits = CheckShardsFit(**model); !fits.ok()) return fits;
  }
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::CreateOrAttach(options_.instance, name, (*model)->spec,
                                 (*model)->local_ranks, mode, options_.device);
  if (!store.ok()) return store.status();
  (*model)->store = *std::move(store);
  InitRuntime(**model, options_.topology.world_size());
  return model;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::BuildMissing(
    const std::string& name, const std::string& layout_json,
    core::Strategy strategy, const absl::Status& why) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      NewEntry(name, layout_json, strategy);
  if (!model.ok()) return model.status();
  (*model)->missing_detail = std::string(why.message());
  InitRuntime(**model, options_.topology.world_size());
  return model;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Create(
    const std::string& name, const std::string& layout_json,
    std::optional<core::Strategy> strategy, const ModelInit& init,
    const std::vector<int>& grad_ranks, const ModelInit& grad_init) {
  absl::MutexLock lock(&mu_);
  if (models_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", name, "' already exists"));
  }
  for (int rank : grad_ranks) {
    if (rank < 0 || rank >= options_.topology.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient rank ", rank, " is outside the world of ",
                       options_.topology.world_size(), " ranks"));
    }
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      Build(name, layout_json, strategy, AttachMode::kCreate);
  if (!model.ok()) return model.status();
  std::shared_ptr<ModelEntry> entry = *std::move(model);
  absl::Status status = absl::OkStatus();
  for (int rank : grad_ranks) {
    entry->grads_by_rank[rank] = true;
    if (!status.ok()) break;
    if (options_.topology.NodeOf(rank) == options_.node) {
      status = entry->store->EnsureGrads(rank);
    }
  }
  if (status.ok() && init.kind == ModelInit::Kind::kSeeded) {
    status = FillSeededShards(*entry, entry->local_ranks, init.seed, false);
  }
  if (init.kind == ModelInit::Kind::kExternal) {
    absl::MutexLock runtime_lock(&entry->runtime_mu);
    entry->awaiting_init = true;
  }
  if (status.ok() && grad_init.kind == ModelInit::Kind::kSeeded) {
    std::vector<int> ranks_with_grads;
    for (int rank : entry->local_ranks) {
      if (entry->store->HasGrads(rank)) ranks_with_grads.push_back(rank);
    }
    status = FillSeededShards(*entry, ranks_with_grads, grad_init.seed, true);
  }
  if (status.ok()) status = Persist(*entry);
  if (!status.ok()) {
    entry->store->Destroy().IgnoreError();
    return status;
  }
  models_[name] = entry;
  spdlog::info("model create name={} strategy={} units={} world={}", name,
               std::string(core::StrategyName(entry->spec.groups.effective)),
               entry->spec.units.size(), options_.topology.world_size());
  return entry;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::CreateFromCheckpoint(
    const std::string& name, const std::string& path,
    const std::vector<std::string>& wrap_patterns, core::Strategy strategy,
    bool use_orig_params, int64_t* bytes_read) {
  absl::StatusOr<std::string> layout =
      LayoutJsonFromCheckpoint(path, wrap_patterns, strategy, use_orig_params,
                               NonFloatingTensors::kReject, "", std::nullopt,
                               options_.checkpoint_admission);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      Create(name, *layout, strategy, ModelInit{}, {}, ModelInit{});
  if (!model.ok()) return model.status();
  absl::StatusOr<int64_t> bytes = LoadCheckpoint(**model, path);
  if (!bytes.ok()) {
    Remove(name).IgnoreError();
    return bytes.status();
  }
  *bytes_read = *bytes;
  return model;
}

absl::Status ModelRegistry::MarkInitialized(ModelEntry& model) {
  {
    absl::MutexLock lock(&model.runtime_mu);
    if (!model.awaiting_init) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model.name,
                       "' is not awaiting init (it was not created with init "
                       "external, or was marked initialised already)"));
    }
    model.awaiting_init = false;
    for (size_t u = 0; u < model.runtime.units.size(); ++u) {
      model.runtime.units[u].generation =
          model.store->BumpGeneration(static_cast<int>(u));
    }
  }
  spdlog::info("model initialised name={} (init external)", model.name);
  return Persist(model);
}

absl::Status ModelRegistry::Remove(const std::string& name) {
  std::shared_ptr<ModelEntry> model;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return core::UnknownModelError(name);
    model = it->second;
    absl::MutexLock runtime_lock(&model->runtime_mu);
    if (model->open_sessions > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", name, "' has ", model->open_sessions, " open sessions"));
    }
    models_.erase(it);
  }
  if (!options_.data_dir.empty()) {
    std::error_code error;
    fs::remove(fs::path(options_.data_dir) / "models" / (name + ".json"),
               error);
  }
  if (model->store == nullptr) {
    return ShardStore::RemoveSegments(options_.instance, name);
  }
  return model->store->Destroy();
}

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

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Find(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return core::UnknownModelError(name);
  return it->second;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Get(
    const std::string& name) const {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model = Find(name);
  if (model.ok() && (*model)->store == nullptr) {
    std::string detail;
    HealthOf(**model, &detail);
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' is MISSING_SHARDS: ", detail));
  }
  return model;
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::GetRecreatingShards(
    const std::string& name) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found = Find(name);
  if (!found.ok() || (*found)->store != nullptr) return found;
  ModelEntry& missing = **found;
  {
    // R15 before anything is recreated: a rank mid-step keeps its phase.
    absl::MutexLock runtime_lock(&missing.runtime_mu);
    if (absl::Status status =
            core::CheckShardWrite(missing.runtime, "load of a checkpoint");
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = ShardStore::RemoveSegments(options_.instance, name);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> fresh =
      Build(name, missing.layout_json, missing.spec.groups.declared,
            AttachMode::kCreate);
  if (!fresh.ok()) return fresh.status();
  for (int rank = 0; rank < options_.topology.world_size(); ++rank) {
    (*fresh)->grads_by_rank[rank] = missing.grads_by_rank[rank];
    if (missing.grads_by_rank[rank] &&
        options_.topology.NodeOf(rank) == options_.node) {
      if (absl::Status status = (*fresh)->store->EnsureGrads(rank);
          !status.ok()) {
        return status;
      }
    }
  }
  {
    // The ranks' recorded phases and steps carry over to the new shards.
    absl::MutexLock old_lock(&missing.runtime_mu);
    absl::MutexLock new_lock(&(*fresh)->runtime_mu);
    (*fresh)->runtime.phase_per_rank = missing.runtime.phase_per_rank;
    (*fresh)->steps = missing.steps;
    (*fresh)->optimizer_entries = missing.optimizer_entries;
    (*fresh)->last_optimizer_step = missing.last_optimizer_step;
  }
  spdlog::warn("model {}: shards recreated (zeros) for a load", name);
  absl::MutexLock lock(&mu_);
  models_[name] = *fresh;
  return fresh;
}

std::vector<std::shared_ptr<ModelEntry>> ModelRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ModelEntry>> models;
  for (const auto& [name, model] : models_) models.push_back(model);
  return models;
}

absl::StatusOr<int64_t> ModelRegistry::LoadCheckpoint(ModelEntry& model,
                                                      const std::string& path,
                                                      bool convert) {
  absl::MutexLock runtime_lock(&model.runtime_mu);
  if (model.open_sessions > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has ", model.open_sessions,
                     " open sessions; close them before loading a checkpoint"));
  }
  absl::MutexLock shards_lock(&model.shards_mu);
  absl::StatusOr<ShardStore::HostShards> shards =
      model.store->OnHost(/*grads=*/false, /*read=*/true);
  if (!shards.ok()) return shards.status();
  absl::StatusOr<int64_t> bytes = server::LoadCheckpoint(
      path, model.spec, model.local_ranks,
      [&](int rank, int unit) { return shards->Shard(rank, unit); }, convert,
      options_.checkpoint_admission);
  if (!bytes.ok()) return bytes.status();
  if (absl::Status flushed = shards->Flush(); !flushed.ok()) return flushed;
  for (size_t u = 0; u < model.runtime.units.size(); ++u) {
    model.runtime.units[u].generation =
        model.store->BumpGeneration(static_cast<int>(u));
    if (core::IsExternalWrite(core::ShardWriter::kLoad)) {
      model.store->NoteExternalWrite(static_cast<int>(u));
    }
  }
  spdlog::info("model load name={} path={} bytes={}", model.name, path, *bytes);
  return bytes;
}

absl::StatusOr<std::vector<std::string>> ModelRegistry::SaveCheckpoint(
    ModelEntry& model, const std::string& path, int64_t max_file_bytes) {
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  absl::StatusOr<ShardStore::HostShards> shards =
      model.store->OnHost(/*grads=*/false, /*read=*/true);
  if (!shards.ok()) return shards.status();
  absl::StatusOr<SavedCheckpoint> saved = server::SaveCheckpoint(
      path, model.spec, model.local_ranks,
      [&](int rank, int unit) { return shards->Shard(rank, unit); },
      {{"summon.model", model.name}},
      max_file_bytes > 0 ? max_file_bytes : kDefaultMaxCheckpointFileBytes,
      options_.checkpoint_admission);
  if (!saved.ok()) return saved.status();
  spdlog::info("model save name={} path={} bytes={}", model.name, path,
               saved->bytes_written);
  return saved->files;
}

absl::StatusOr<CheckpointFiles> ModelRegistry::PlanSave(
    const ModelEntry& model, const std::string& path,
    int64_t max_file_bytes) const {
  return PlanCheckpoint(
      path, model.spec, {{"summon.model", model.name}},
      max_file_bytes > 0 ? max_file_bytes : kDefaultMaxCheckpointFileBytes,
      options_.checkpoint_admission);
}

absl::StatusOr<int64_t> ModelRegistry::WriteSaveRanges(
    ModelEntry& model, const CheckpointFiles& plan) {
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  absl::StatusOr<ShardStore::HostShards> shards =
      model.store->OnHost(/*grads=*/false, /*read=*/true);
  if (!shards.ok()) return shards.status();
  return WriteCheckpointRanges(
      plan, model.spec, model.local_ranks,
      [&](int rank, int unit) { return shards->Shard(rank, unit); });
}

absl::StatusOr<std::vector<ShardChecksums>> ModelRegistry::Checksums(
    ModelEntry& model) {
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  std::vector<ShardChecksums> result;
  absl::StatusOr<ShardStore::HostShards> params =
      model.store->OnHost(/*grads=*/false, /*read=*/true);
  if (!params.ok()) return params.status();
  absl::StatusOr<ShardStore::HostShards> grads =
      model.store->OnHost(/*grads=*/true, /*read=*/true);
  if (!grads.ok()) return grads.status();
  for (int rank : model.local_ranks) {
    for (size_t u = 0; u < model.spec.units.size(); ++u) {
      const int unit = static_cast<int>(u);
      const int64_t bytes = model.spec.units[u].layout.shard_bytes();
      ShardChecksums sums;
      sums.rank = rank;
      sums.unit = unit;
      sums.params = Fnv1a(params->Shard(rank, unit), bytes);
      if (model.store->HasGrads(rank)) {
        sums.grads = Fnv1a(grads->Shard(rank, unit), bytes);
      }
      sums.generation = model.store->Generation(unit);
      result.push_back(sums);
    }
  }
  return result;
}

}  // namespace summon::server
