// A model's shards to and from safetensors checkpoints: creating a model
// from a checkpoint, loading one into its shards, saving them (whole, or as
// one node's ranges of a save planned across the cluster) and the shard
// checksums that tell two copies apart. Apart from model_registry.cc because
// this is the registry's only use of server/checkpoint/; the file formats
// themselves live there.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/trainer_rules.h"
#include "server/checkpoint/checkpoint.h"
#include "server/model/model_registry.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

uint64_t Fnv1a(const uint8_t* data, int64_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int64_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

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
  BeforeShardsWrite(model, ShardsWrite{});
  // One call into the store, which writes, flushes and moves the counters;
  // the entry takes the generations it chose.
  std::vector<uint64_t> generations;
  absl::StatusOr<int64_t> bytes = model.store->RewriteParams(
      [&](const ShardStore::HostShards& shards) {
        return server::LoadCheckpoint(
            path, model.spec, model.local_ranks,
            [&](int rank, int unit) { return shards.Shard(rank, unit); },
            convert, options_.checkpoint_admission);
      },
      core::IsExternalWrite(core::ShardWriter::kLoad), &generations);
  if (!bytes.ok()) return bytes.status();
  for (size_t u = 0; u < model.runtime.units.size() && u < generations.size();
       ++u) {
    model.runtime.units[u].generation = generations[u];
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
