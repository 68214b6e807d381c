// The shard store's mapped segments: finding a hosted rank, the params
// and grads shards, the descriptions trainers map, sizes, and deleting a
// model's segments. Creating and attaching them is in shard_segments.cc,
// their names in segment_names.cc, the shard bytes in shard_store_bytes.cc,
// the counters in shard_store_counters.cc and the writeback's staging in
// shard_store_staging.cc.
#include "server/store/shard_store.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/shm_segment.h"

namespace summon::server {
namespace {

// The element of `ranks` (const or not) for global rank `rank`, or nullptr.
template <typename RankVector>
auto FindByRank(RankVector& ranks, int rank) -> decltype(ranks.data()) {
  for (auto& segments : ranks) {
    if (segments.rank == rank) return &segments;
  }
  return nullptr;
}

}  // namespace

ShardStore::ShardStore(std::string instance, std::string model_name,
                       std::vector<int> local_ranks,
                       const ShardMemoryProvider* device,
                       std::shared_ptr<StagingPool> staging_pool)
    : instance_(std::move(instance)),
      model_name_(std::move(model_name)),
      local_ranks_(std::move(local_ranks)),
      device_(device),
      staging_pool_(staging_pool != nullptr ? std::move(staging_pool)
                                            : std::make_shared<StagingPool>()) {
}

const ShardStore::RankSegments* ShardStore::FindRank(int rank) const {
  return FindByRank(ranks_, rank);
}

ShardStore::RankSegments* ShardStore::FindRank(int rank) {
  return FindByRank(ranks_, rank);
}

absl::Status ShardStore::NotHosted(int rank) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", rank, " is not hosted by this node's store of model '",
      model_name_, "'"));
}

uint8_t* ShardStore::ParamShard(int rank, int unit) const {
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr || !ValidUnit(unit)) return nullptr;
  uint8_t* base = segments->params_bytes->host();
  return base == nullptr ? nullptr : base + unit_offsets_[unit];
}

uint8_t* ShardStore::GradShard(int rank, int unit) const {
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr || segments->grads == nullptr || !ValidUnit(unit)) {
    return nullptr;
  }
  uint8_t* base = segments->grads_bytes->host();
  return base == nullptr ? nullptr : base + unit_offsets_[unit];
}

bool ShardStore::HasGrads(int rank) const {
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  return segments != nullptr && segments->grads != nullptr;
}

std::vector<std::string> ShardStore::UnlinkedSegments() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> unlinked;
  for (const RankSegments& rank : ranks_) {
    for (const shm::Segment* segment : {rank.params.get(), rank.grads.get()}) {
      if (segment == nullptr) continue;
      struct stat info;
      if (stat(("/dev/shm" + segment->name()).c_str(), &info) != 0) {
        unlinked.push_back(segment->name());
      }
    }
  }
  return unlinked;
}

std::vector<ShardStore::SegmentDescription> ShardStore::Describe(
    int rank) const {
  absl::MutexLock lock(&mu_);
  std::vector<SegmentDescription> descriptions;
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr) return descriptions;
  for (const shm::Segment* segment :
       {segments->params.get(), segments->grads.get()}) {
    if (segment == nullptr) continue;
    const bool grads = segment == segments->grads.get();
    SegmentDescription description;
    description.name = segment->name();
    description.size = segment->size();
    description.unit_offsets = unit_offsets_;
    description.unit_bytes = unit_bytes_;
    description.grads = grads;
    description.rank = rank;
    const ShardMemory& bytes =
        *(grads ? segments->grads_bytes : segments->params_bytes);
    description.device = bytes.device();
    if (on_device()) {
      // A handle that cannot be made leaves the description without one;
      // the trainer's open then fails and says so.
      description.ipc_handle = bytes.IpcHandle().value_or("");
      description.device_bytes = bytes.size();
    }
    descriptions.push_back(std::move(description));
  }
  return descriptions;
}

int64_t ShardStore::TotalBytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const RankSegments& rank : ranks_) {
    for (const shm::Segment* segment :
         {rank.params.get(), rank.grads.get(), rank.staged.get(),
          rank.staged_grads.get()}) {
      if (segment != nullptr) total += segment->size();
    }
  }
  return total;
}

absl::Status ShardStore::Destroy() {
  absl::MutexLock lock(&mu_);
  ++changes_;  // Wakes watchers, who find the model gone.
  // A pre-fault walks ranks_ and writes a staged segment without mu_: it
  // stops at its next chunk, and ranks_ is cleared only after.
  prefault_cancel_ = true;
  mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &prefault_running_));
  absl::Status first_failure;
  for (RankSegments& rank : ranks_) {
    if (rank.spare_bytes > 0) {
      staging_pool_->Drop(rank.spare_bytes, /*reused=*/false);
      rank.spare_bytes = 0;
    }
    for (std::unique_ptr<ShardMemory>* bytes :
         {&rank.params_bytes, &rank.grads_bytes, &rank.staged_bytes,
          &rank.staged_grads_bytes}) {
      bytes->reset();
    }
    for (std::unique_ptr<shm::Segment>* segment :
         {&rank.params, &rank.grads, &rank.staged, &rank.staged_grads}) {
      if (*segment == nullptr) continue;
      const std::string name = (*segment)->name();
      segment->reset();
      first_failure.Update(shm::Unlink(name));
    }
  }
  ranks_.clear();
  return first_failure;
}

}  // namespace summon::server
