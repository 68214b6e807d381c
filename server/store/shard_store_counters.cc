// The shard store's per-unit counters, kept in every local rank's params
// header: the generation (any change, R7) and the external-write counter
// (R18), and the change count that wakes watchers (Trainer.WatchUnits).

#include <algorithm>

#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {

void ShardStore::ReconcileGenerations() {
  for (int unit = 0; unit < num_units(); ++unit) {
    uint64_t highest = 0;
    uint64_t most_external = 0;
    for (const RankSegments& rank : ranks_) {
      const shm::UnitEntry& entry = rank.params->units()[unit];
      highest = std::max(highest, shm::LoadShared(&entry.generation));
      most_external =
          std::max(most_external, shm::LoadShared(&entry.external_writes));
    }
    SetGenerationLocked(unit, highest);
    SetExternalWritesLocked(unit, most_external);
  }
}

uint64_t ShardStore::Generation(int unit) const {
  absl::MutexLock lock(&mu_);
  if (ranks_.empty() || !ValidUnit(unit)) return 0;
  return shm::LoadShared(&ranks_.front().params->units()[unit].generation);
}

uint64_t ShardStore::BumpGeneration(int unit) {
  absl::MutexLock lock(&mu_);
  if (ranks_.empty() || !ValidUnit(unit)) return 0;
  const uint64_t generation =
      shm::LoadShared(&ranks_.front().params->units()[unit].generation) + 1;
  SetGenerationLocked(unit, generation);
  return generation;
}

void ShardStore::SetGeneration(int unit, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  SetGenerationLocked(unit, generation);
}

uint64_t ShardStore::ChangeCount() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

uint64_t ShardStore::AwaitChange(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return changes_ != seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return changes_;
}

void ShardStore::SetGenerationLocked(int unit, uint64_t generation) {
  if (!ValidUnit(unit)) return;
  ++changes_;
  for (RankSegments& rank : ranks_) {
    shm::StoreShared(&rank.params->units()[unit].generation, generation);
  }
}

uint64_t ShardStore::ExternalWrites(int unit) const {
  absl::MutexLock lock(&mu_);
  if (ranks_.empty() || !ValidUnit(unit)) return 0;
  return shm::LoadShared(&ranks_.front().params->units()[unit].external_writes);
}

void ShardStore::NoteExternalWrite(int unit) {
  absl::MutexLock lock(&mu_);
  if (ranks_.empty() || !ValidUnit(unit)) return;
  SetExternalWritesLocked(
      unit,
      shm::LoadShared(&ranks_.front().params->units()[unit].external_writes) +
          1);
}

void ShardStore::SetExternalWritesLocked(int unit, uint64_t count) {
  if (!ValidUnit(unit)) return;
  ++changes_;
  for (RankSegments& rank : ranks_) {
    shm::StoreShared(&rank.params->units()[unit].external_writes, count);
  }
}

}  // namespace summon::server
