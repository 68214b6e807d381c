// A model entry's own state: its runtime at a fresh start and its health.
// Apart from the registry (model_registry.cc), which creates, finds and
// removes entries; see model_entry.h.
#include "server/model/model_entry.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::server {

void InitRuntime(ModelEntry& model, int world_size) {
  absl::MutexLock lock(&model.runtime_mu);
  model.runtime.model = model.name;
  model.runtime.phase_per_rank.assign(world_size, core::TrainingPhase::kIdle);
  model.steps.assign(world_size, std::nullopt);
  model.optimizer_entries.assign(world_size, 0);
  model.publish_asked.assign(world_size, std::nullopt);
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    core::UnitRuntimeState unit;
    unit.fqn = model.spec.units[u].fqn;
    if (model.store != nullptr) {
      unit.generation = model.store->Generation(static_cast<int>(u));
    }
    model.runtime.units.push_back(std::move(unit));
  }
}

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

}  // namespace summon::server
