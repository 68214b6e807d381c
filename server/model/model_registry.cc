// The registry's core: creating, finding, recreating and removing the
// node's models. Checkpoint loads and saves of a model's shards are in
// model_checkpoints.cc, the models file of the data dir in models_file.cc,
// and an entry's own state in model_entry.cc.
#include "server/model/model_registry.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/closest_name.h"
#include "core/seeded_init.h"
#include "core/trainer_rules.h"
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
        const std::string& fqn = layout.params()[p].fqn;
        const std::string name = grads ? fqn + ".grad" : fqn;
        absl::Status status;
        core::ForEachRun(slice, [&](int64_t intra, int64_t in_shard,
                                    int64_t numel) {
          if (status.ok()) {
            status = core::FillSeeded(name, seed, layout.dtype(), intra, numel,
                                      shard + in_shard * size);
          }
        });
        if (!status.ok()) return status;
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

}  // namespace

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
                                 (*model)->local_ranks, mode, options_.device,
                                 options_.staging_pool);
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

absl::Status ModelRegistry::EndInit(ModelEntry& model) {
  {
    // Persisted even when already false: the leader clears the flag when it
    // decides, before this reaches its own node.
    absl::MutexLock lock(&model.runtime_mu);
    model.awaiting_init = false;
  }
  spdlog::info("model initialised name={} (init external)", model.name);
  return Persist(model);
}

absl::Status ModelRegistry::Remove(const std::string& name) {
  return RemoveLocal(name, /*publish=*/true);
}

absl::Status ModelRegistry::RemoveLocal(const std::string& name, bool publish) {
  std::shared_ptr<ModelEntry> model;
  const auto check = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = models_.find(name);
    if (it == models_.end()) return core::UnknownModelError(name);
    model = it->second;
    absl::MutexLock runtime_lock(&model->runtime_mu);
    if (model->open_sessions > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", name, "' has ", model->open_sessions, " open sessions"));
    }
    return absl::OkStatus();
  };
  if (publish && record_hook_) {
    // The tombstone goes first (a round trip to the coordinator, so not
    // under mu_): a refused one leaves the model as it was.
    {
      absl::MutexLock lock(&mu_);
      if (absl::Status status = check(); !status.ok()) return status;
    }
    if (absl::Status status = record_hook_(name, Tombstone(name));
        !status.ok()) {
      return status;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status status = check(); !status.ok()) return status;
    models_.erase(name);
  }
  if (!options_.data_dir.empty()) {
    std::error_code error;
    fs::remove(fs::path(options_.data_dir) / "models" / (name + ".json"),
               error);
  }
  if (model->store == nullptr) {
    return ShardStore::RemoveSegments(options_.instance, name);
  }
  // Readers of a published version's live units finish first; later ones
  // hear that the model is gone.
  absl::MutexLock shards_lock(&model->shards_mu);
  BeforeShardsWrite(*model, ShardsWrite{-1, {}, /*deleting=*/true});
  return model->store->Destroy();
}

absl::StatusOr<std::shared_ptr<ModelEntry>> ModelRegistry::Find(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    std::vector<std::string> names;
    for (const auto& [known, unused] : models_) names.push_back(known);
    const std::string closest = core::ClosestName(name, names);
    const absl::Status unknown = core::UnknownModelError(name);
    if (closest.empty()) return unknown;
    return absl::Status(unknown.code(),
                        absl::StrCat(unknown.message(), " (did you mean '",
                                     closest, "'?)"));
  }
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

}  // namespace summon::server
