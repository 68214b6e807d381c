// How the shard store reaches shard bytes whatever their placement: the
// segment's own mapping on the host, a ShardMemoryProvider's allocation on a
// device (see ShardMemory).
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {

absl::StatusOr<std::unique_ptr<ShardMemory>> ShardStore::BytesOf(
    const RankSegments& rank, const shm::Segment& segment) const {
  if (!on_device()) {
    return std::make_unique<HostShardMemory>(segment.data(), segment.size());
  }
  absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
      device_->Allocate(rank.local_index, segment_bytes_);
  if (!bytes.ok()) {
    return absl::Status(
        bytes.status().code(),
        absl::StrCat("placing rank ", rank.rank, "'s shards of model '",
                     model_name_, "' on ", device_->name(), ": ",
                     bytes.status().message()));
  }
  return bytes;
}

ShardMemory* ShardStore::Bytes(const RankSegments& rank, SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kParams:
      return rank.params_bytes.get();
    case SegmentKind::kGrads:
      return rank.grads_bytes.get();
    case SegmentKind::kStaged:
      return rank.staged_bytes.get();
    case SegmentKind::kStagedGrads:
      return rank.staged_grads_bytes.get();
  }
  return nullptr;
}

absl::StatusOr<ShardMemory*> ShardStore::ShardBytes(int rank, int unit,
                                                    bool grads, int64_t offset,
                                                    int64_t bytes) const {
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr || !ValidUnit(unit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no shard of unit ", unit, " of rank ", rank,
                     " in this node's store of model '", model_name_, "'"));
  }
  ShardMemory* memory =
      Bytes(*segments, grads ? SegmentKind::kGrads : SegmentKind::kParams);
  if (memory == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " holds no gradients of model '", model_name_, "'"));
  }
  if (offset < 0 || bytes < 0 || offset > unit_bytes_[unit] ||
      bytes > unit_bytes_[unit] - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes [", offset, ", ", offset + bytes, ") are outside unit ", unit,
        "'s shard of ", unit_bytes_[unit], " bytes"));
  }
  return memory;
}

absl::Status ShardStore::ReadShard(int rank, int unit, bool grads,
                                   int64_t offset, void* to,
                                   int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardMemory*> memory =
      ShardBytes(rank, unit, grads, offset, bytes);
  if (!memory.ok()) return memory.status();
  return (*memory)->Read(unit_offsets_[unit] + offset, to, bytes);
}

absl::Status ShardStore::AccumulateWatchShard(
    int rank, int unit, bool grads, int64_t offset, core::DType dtype,
    int64_t numel, const std::optional<core::HistogramRange>& range,
    core::WatchPartial* partial) const {
  const int64_t element =
      std::max<int64_t>(1, static_cast<int64_t>(core::ElementSize(dtype)));
  if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / element) {
    return absl::InvalidArgumentError(absl::StrCat(
        numel, " elements are no range of unit ", unit, "'s shard"));
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardMemory*> memory =
      ShardBytes(rank, unit, grads, offset, numel * element);
  if (!memory.ok()) return memory.status();
  return (*memory)->AccumulateWatch(unit_offsets_[unit] + offset, dtype, numel,
                                    range, partial);
}

absl::Status ShardStore::CopyShardTo(int rank, int unit, bool grads,
                                     int64_t offset, ShardMemory& to,
                                     int64_t to_offset, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardMemory*> memory =
      ShardBytes(rank, unit, grads, offset, bytes);
  if (!memory.ok()) return memory.status();
  return to.CopyRange(**memory, unit_offsets_[unit] + offset, to_offset, bytes);
}

int ShardStore::DeviceOf(int rank) const {
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr || segments->params_bytes == nullptr) return -1;
  return segments->params_bytes->device();
}

absl::StatusOr<std::unique_ptr<ShardMemory>> ShardStore::AllocateBeside(
    int rank, int64_t bytes) const {
  if (!on_device()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model_name_, "' keeps its shards in host memory"));
  }
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " of model '", model_name_, "' is not held here"));
  }
  absl::StatusOr<std::unique_ptr<ShardMemory>> memory =
      device_->Allocate(segments->local_index, bytes);
  if (!memory.ok()) {
    return absl::Status(
        memory.status().code(),
        absl::StrCat("placing a session copy of model '", model_name_,
                     "' beside rank ", rank, "'s shards on ", device_->name(),
                     " (for host memory open with --offload-to-cpu, "
                     "offload_to_cpu): ",
                     memory.status().message()));
  }
  return memory;
}

absl::Status ShardStore::WriteShard(int rank, int unit, bool grads,
                                    int64_t offset, const void* from,
                                    int64_t bytes) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardMemory*> memory =
      ShardBytes(rank, unit, grads, offset, bytes);
  if (!memory.ok()) return memory.status();
  return (*memory)->Write(unit_offsets_[unit] + offset, from, bytes);
}

absl::StatusOr<ShardStore::HostShards> ShardStore::OnHost(bool grads,
                                                          bool read) const {
  absl::MutexLock lock(&mu_);
  HostShards shards;
  shards.unit_offsets_ = unit_offsets_;
  for (const RankSegments& segments : ranks_) {
    ShardMemory* memory =
        Bytes(segments, grads ? SegmentKind::kGrads : SegmentKind::kParams);
    if (memory == nullptr) continue;
    HostShards::Rank& rank = shards.ranks_.emplace_back();
    rank.rank = segments.rank;
    rank.base = memory->host();
    if (rank.base != nullptr) continue;
    rank.memory = memory;
    rank.copy.resize(static_cast<size_t>(memory->size()));
    rank.base = rank.copy.data();
    if (!read) continue;
    if (absl::Status status = memory->Read(0, rank.base, memory->size());
        !status.ok()) {
      return status;
    }
  }
  return shards;
}

uint8_t* ShardStore::HostShards::Shard(int rank, int unit) const {
  if (unit < 0 || unit >= static_cast<int>(unit_offsets_.size())) {
    return nullptr;
  }
  for (const Rank& held : ranks_) {
    if (held.rank == rank) return held.base + unit_offsets_[unit];
  }
  return nullptr;
}

absl::Status ShardStore::HostShards::Flush() {
  for (Rank& rank : ranks_) {
    if (rank.memory == nullptr) continue;
    if (absl::Status status = rank.memory->Write(
            0, rank.copy.data(), static_cast<int64_t>(rank.copy.size()));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardStore::RewriteParams(
    const std::function<absl::StatusOr<int64_t>(const HostShards&)>& write,
    bool external, std::vector<uint64_t>* generations) {
  absl::StatusOr<HostShards> shards = OnHost(/*grads=*/false, /*read=*/true);
  if (!shards.ok()) return shards.status();
  absl::StatusOr<int64_t> written = write(*shards);
  if (!written.ok()) return written.status();
  if (absl::Status flushed = shards->Flush(); !flushed.ok()) return flushed;
  generations->clear();
  for (int unit = 0; unit < num_units(); ++unit) {
    generations->push_back(BumpGeneration(unit));
    if (external) NoteExternalWrite(unit);
  }
  return written;
}

}  // namespace summon::server
