// The staged segments of the two-phase writeback (R8, docs/rules.md#r8;
// docs/design.md#how-nodes-work-together): PREPARE fills them, COMMIT
// copies them into the params. They live in shared memory so that a daemon
// killed during COMMIT finishes it after a restart instead of leaving some
// ranks written and others not. After a commit they stay, spare, in the
// node's StagingPool (bounded in bytes and idle time): the next writeback
// reuses their allocated pages instead of creating, zeroing and unlinking
// 2x the unit's bytes of shared memory each time.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {
namespace {

// Copies the unit's `bytes` at `base` from `from` to `to` except the
// sorted, disjoint ranges in `skipped` (relative to `base`, clamped to the
// unit): a writeback stages its slices over those, so copying them first
// would be a wasted pass.
absl::Status CopyAllBut(const ShardMemory& from, int64_t base, int64_t bytes,
                        const ShardStore::ByteRanges& skipped,
                        ShardMemory& to) {
  int64_t at = 0;
  for (const auto& [begin, end] : skipped) {
    const int64_t stop = std::clamp<int64_t>(begin, at, bytes);
    if (stop > at) {
      if (absl::Status status = to.CopyFrom(from, base + at, stop - at);
          !status.ok()) {
        return status;
      }
    }
    at = std::clamp<int64_t>(end, stop, bytes);
  }
  if (at == bytes) return absl::OkStatus();
  return to.CopyFrom(from, base + at, bytes - at);
}

absl::StatusOr<uint8_t*> HostAddress(absl::StatusOr<ShardMemory*> memory,
                                     int64_t offset) {
  if (!memory.ok()) return memory.status();
  if ((*memory)->host() == nullptr) {
    return absl::FailedPreconditionError(
        "device-placed shards have no host address; stage with StageBytes");
  }
  return (*memory)->host() + offset;
}

}  // namespace

absl::StatusOr<ShardStore::RankSegments*> ShardStore::StagingRank(int rank,
                                                                  int unit,
                                                                  bool grads) {
  RankSegments* segments = FindRank(rank);
  if (segments == nullptr || !ValidUnit(unit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no shard of unit ", unit, " of rank ", rank,
                     " in this node's store of model '", model_name_, "'"));
  }
  if (grads && segments->grads == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " holds no gradients of unit ", unit,
                     " in this node's store of model '", model_name_, "'"));
  }
  return segments;
}

absl::StatusOr<uint8_t*> ShardStore::StagingShard(
    int rank, int unit, absl::string_view session_id,
    uint64_t target_generation, const ByteRanges& overwritten) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<RankSegments*> segments = StagingRank(rank, unit, false);
  if (!segments.ok()) return segments.status();
  return HostAddress(Staging(**segments, SegmentKind::kStaged, unit, session_id,
                             target_generation, overwritten),
                     unit_offsets_[unit]);
}

absl::StatusOr<uint8_t*> ShardStore::StagingGradShard(
    int rank, int unit, absl::string_view session_id,
    uint64_t target_generation, const ByteRanges& overwritten) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<RankSegments*> segments = StagingRank(rank, unit, true);
  if (!segments.ok()) return segments.status();
  return HostAddress(Staging(**segments, SegmentKind::kStagedGrads, unit,
                             session_id, target_generation, overwritten),
                     unit_offsets_[unit]);
}

absl::Status ShardStore::StageBytes(int rank, int unit, bool grads,
                                    absl::string_view session_id,
                                    uint64_t target_generation,
                                    const ByteRanges& overwritten,
                                    int64_t offset, const void* from,
                                    int64_t bytes) {
  return StageWith(rank, unit, grads, session_id, target_generation,
                   overwritten, offset, bytes,
                   [&](ShardMemory& staging, int64_t at) {
                     return staging.Write(at, from, bytes);
                   });
}

absl::Status ShardStore::StageFrom(int rank, int unit, bool grads,
                                   absl::string_view session_id,
                                   uint64_t target_generation,
                                   const ByteRanges& overwritten,
                                   int64_t offset, const ShardMemory& from,
                                   int64_t from_offset, int64_t bytes) {
  return StageWith(rank, unit, grads, session_id, target_generation,
                   overwritten, offset, bytes,
                   [&](ShardMemory& staging, int64_t at) {
                     return staging.CopyRange(from, from_offset, at, bytes);
                   });
}

absl::Status ShardStore::StageWith(
    int rank, int unit, bool grads, absl::string_view session_id,
    uint64_t target_generation, const ByteRanges& overwritten, int64_t offset,
    int64_t bytes,
    const std::function<absl::Status(ShardMemory&, int64_t)>& fill) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<RankSegments*> segments = StagingRank(rank, unit, grads);
  if (!segments.ok()) return segments.status();
  if (offset < 0 || bytes < 0 || offset > unit_bytes_[unit] ||
      bytes > unit_bytes_[unit] - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes [", offset, ", ", offset + bytes, ") are outside unit ", unit,
        "'s shard of ", unit_bytes_[unit], " bytes"));
  }
  const SegmentKind kind =
      grads ? SegmentKind::kStagedGrads : SegmentKind::kStaged;
  absl::StatusOr<ShardMemory*> staging = Staging(
      **segments, kind, unit, session_id, target_generation, overwritten);
  if (!staging.ok()) return staging.status();
  return fill(**staging, unit_offsets_[unit] + offset);
}

absl::StatusOr<ShardMemory*> ShardStore::Staging(
    RankSegments& segments, SegmentKind kind, int unit,
    absl::string_view session_id, uint64_t target_generation,
    const ByteRanges& overwritten) {
  if (session_id.empty() || session_id.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a staging session id has 1 to ", kMaxSessionIdBytes, " bytes"));
  }
  const bool grads = kind == SegmentKind::kStagedGrads;
  // A pre-fault running on this rank finishes first; its spare is adopted.
  AwaitPrefault(segments);
  std::unique_ptr<shm::Segment>& slot =
      grads ? segments.staged_grads : segments.staged;
  std::unique_ptr<ShardMemory>& slot_bytes =
      grads ? segments.staged_grads_bytes : segments.staged_bytes;
  if (slot == nullptr) {
    absl::StatusOr<std::unique_ptr<shm::Segment>> created =
        CreateSegment(segments.rank, kind, segments.fingerprint, session_id);
    if (!created.ok()) return created.status();
    absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
        BytesOf(segments, **created);
    if (!bytes.ok()) {
      shm::Unlink((*created)->name()).IgnoreError();  // The failure is news.
      return bytes.status();
    }
    slot = *std::move(created);
    slot_bytes = *std::move(bytes);
  }
  shm::Segment& staged = *slot;
  if (IsSpare(staged)) {
    if (segments.spare_bytes > 0) {
      staging_pool_->Drop(segments.spare_bytes, /*reused=*/true);
      segments.spare_bytes = 0;
    }
    // The unit flags were cleared when it became spare; the session id is
    // published last, so until then a crash leaves a spare, never a claim.
    shm::SegmentHeader& header = *staged.header();
    std::memcpy(header.session_id, session_id.data(), session_id.size());
    shm::StoreShared(&header.session_id_bytes,
                     static_cast<uint32_t>(session_id.size()));
  }
  const absl::string_view staged_session(staged.header()->session_id,
                                         staged.header()->session_id_bytes);
  if (staged_session != session_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", segments.rank,
                     "'s staging area holds the writeback of "
                     "session '",
                     staged_session, "'; commit or clear it before staging '",
                     session_id, "'"));
  }
  shm::UnitEntry& entry = staged.units()[unit];
  if (shm::LoadShared(&entry.flags) & shm::kUnitStaged) {
    const uint64_t staged_generation = shm::LoadShared(&entry.generation);
    if (staged_generation != target_generation) {
      return absl::FailedPreconditionError(
          absl::StrCat("unit ", unit, " of rank ", segments.rank,
                       " is staged for "
                       "generation ",
                       staged_generation, ", not ", target_generation));
    }
    return slot_bytes.get();
  }
  if (!on_device()) {
    if (absl::Status status =
            staged.Reserve(unit_offsets_[unit], unit_bytes_[unit]);
        !status.ok()) {
      return status;
    }
  }
  const ShardMemory& current =
      grads ? *segments.grads_bytes : *segments.params_bytes;
  if (absl::Status status =
          CopyAllBut(current, unit_offsets_[unit], unit_bytes_[unit],
                     overwritten, *slot_bytes);
      !status.ok()) {
    return status;
  }
  shm::StoreShared(&entry.generation, target_generation);
  // A writeback is an external write (R18); the target is recorded with the
  // staged data so that a COMMIT re-run after a crash sets it, not adds it.
  shm::StoreShared(
      &entry.external_writes,
      shm::LoadShared(&segments.params->units()[unit].external_writes) + 1);
  shm::StoreShared(&entry.flags, shm::kUnitStaged);
  return slot_bytes.get();
}

std::optional<ShardStore::StagedWriteback> ShardStore::Staged(int rank) const {
  absl::MutexLock lock(&mu_);
  const RankSegments* segments = FindRank(rank);
  if (segments == nullptr || segments->staged == nullptr) return std::nullopt;
  if (OnlySpares(*segments)) return std::nullopt;
  // Grads staged under a spare params segment still name their session.
  const shm::Segment& staged =
      IsSpare(*segments->staged) ? *segments->staged_grads : *segments->staged;
  StagedWriteback writeback;
  writeback.session_id.assign(staged.header()->session_id,
                              staged.header()->session_id_bytes);
  for (int unit = 0; unit < num_units(); ++unit) {
    const shm::UnitEntry& entry = staged.units()[unit];
    if (shm::LoadShared(&entry.flags) & shm::kUnitStaged) {
      writeback.target_generations[unit] = shm::LoadShared(&entry.generation);
    }
  }
  return writeback;
}

absl::Status ShardStore::CommitStaging(absl::string_view session_id) {
  absl::MutexLock lock(&mu_);
  std::vector<RankSegments*> committing;
  std::map<int, uint64_t> targets;
  std::map<int, uint64_t> external_targets;
  for (RankSegments& rank : ranks_) {
    if (rank.staged == nullptr) continue;
    const shm::SegmentHeader& header = *rank.staged->header();
    if (absl::string_view(header.session_id, header.session_id_bytes) !=
        session_id) {
      continue;
    }
    committing.push_back(&rank);
    for (int unit = 0; unit < num_units(); ++unit) {
      const shm::UnitEntry& entry = rank.staged->units()[unit];
      if (!(shm::LoadShared(&entry.flags) & shm::kUnitStaged)) continue;
      const uint64_t target = shm::LoadShared(&entry.generation);
      uint64_t& external = external_targets[unit];
      external = std::max(external, shm::LoadShared(&entry.external_writes));
      const auto [it, inserted] = targets.emplace(unit, target);
      if (!inserted && it->second != target) {
        return absl::FailedPreconditionError(
            absl::StrCat("session '", session_id, "' staged unit ", unit,
                         " for generations ", it->second, " and ", target,
                         " on different ranks; nothing was committed"));
      }
    }
  }
  if (committing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("nothing is staged for session '", session_id,
                     "' in this node's store of model '", model_name_, "'"));
  }
  for (RankSegments* rank : committing) {
    for (const auto& [unit, target] : targets) {
      if (shm::LoadShared(&rank->staged->units()[unit].flags) &
          shm::kUnitStaged) {
        if (absl::Status status = rank->params_bytes->CopyFrom(
                *rank->staged_bytes, unit_offsets_[unit], unit_bytes_[unit]);
            !status.ok()) {
          return status;
        }
      }
      if (rank->staged_grads != nullptr && rank->grads != nullptr &&
          (shm::LoadShared(&rank->staged_grads->units()[unit].flags) &
           shm::kUnitStaged)) {
        if (absl::Status status = rank->grads_bytes->CopyFrom(
                *rank->staged_grads_bytes, unit_offsets_[unit],
                unit_bytes_[unit]);
            !status.ok()) {
          return status;
        }
      }
    }
  }
  for (const auto& [unit, target] : targets) {
    SetGenerationLocked(unit, target);
    SetExternalWritesLocked(unit, external_targets[unit]);
  }
  for (RankSegments* rank : committing) MakeStagingSpare(*rank);
  return absl::OkStatus();
}

bool ShardStore::IsSpare(const shm::Segment& staged) {
  return shm::LoadShared(&staged.header()->session_id_bytes) == 0;
}

bool ShardStore::OnlySpares(const RankSegments& rank) {
  if (rank.staged == nullptr && rank.staged_grads == nullptr) return false;
  for (const shm::Segment* segment :
       {rank.staged.get(), rank.staged_grads.get()}) {
    if (segment != nullptr && !IsSpare(*segment)) return false;
  }
  return true;
}

void ShardStore::MakeStagingSpare(RankSegments& rank) {
  for (shm::Segment* segment : {rank.staged.get(), rank.staged_grads.get()}) {
    if (segment == nullptr) continue;
    // The session id goes first: from then on no COMMIT re-run after a
    // crash takes this segment for its own, whatever the flags still say.
    shm::StoreShared(&segment->header()->session_id_bytes, uint32_t{0});
    for (int unit = 0; unit < num_units(); ++unit) {
      shm::StoreShared(&segment->units()[unit].flags, uint64_t{0});
    }
  }
  int64_t bytes = 0;
  for (const shm::Segment* segment :
       {rank.staged.get(), rank.staged_grads.get()}) {
    if (segment != nullptr) bytes += segment_bytes_;
  }
  if (rank.spare_bytes > 0) staging_pool_->Drop(rank.spare_bytes, false);
  rank.spare_bytes = 0;
  if (!staging_pool_->Keep(bytes)) {
    RemoveStaging(rank).IgnoreError();  // Unlinked now or at the exit.
    return;
  }
  rank.spare_bytes = bytes;
  rank.spare_since = absl::Now();
  StartSpareReaper();
}

void ShardStore::StartSpareReaper() {
  if (spare_reaper_running_) return;
  if (spare_reaper_.joinable()) spare_reaper_.join();  // It has ended.
  spare_reaper_running_ = true;
  spare_reaper_ = std::thread([this] { ReapSpareStaging(); });
}

// The store's destructor is all about the spares: it stops their reaper and
// unlinks them.
ShardStore::~ShardStore() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  prefault_cancel_ = true;
  if (prefault_.joinable()) {
    mu_.Await(absl::Condition(
        +[](bool* running) { return !*running; }, &prefault_running_));
    prefault_.join();
  }
  // The reaper clears spare_reaper_running_ and lets go of mu_ as it ends.
  if (spare_reaper_.joinable()) {
    mu_.Await(absl::Condition(
        +[](bool* running) { return !*running; }, &spare_reaper_running_));
    spare_reaper_.join();
  }
  // A stopped daemon leaves its shards, and staged data a restart must
  // finish, but no spares: they hold nothing.
  for (RankSegments& rank : ranks_) {
    if (OnlySpares(rank)) RemoveStaging(rank).IgnoreError();
  }
}

void ShardStore::ReapSpareStaging() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    for (RankSegments& rank : ranks_) {
      // A rank mid pre-fault is reaped once it is done (its idle clock
      // starts then).
      // Nor is any while a writable session is open: its writeback is what
      // they are kept for (WritableClosed starts their clock).
      if (!OnlySpares(rank) || rank.prefaulting || writable_sessions_ > 0) {
        continue;
      }
      const absl::Time due =
          rank.spare_since + staging_pool_->options().max_idle;
      if (due <= now) {
        RemoveStaging(rank).IgnoreError();  // Unlinked now or at the exit.
      } else {
        next = std::min(next, due);
      }
    }
    if (next == absl::InfiniteFuture()) break;
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
  }
  spare_reaper_running_ = false;
}

absl::Status ShardStore::ClearStaging(int rank) {
  absl::MutexLock lock(&mu_);
  RankSegments* segments = FindRank(rank);
  if (segments == nullptr) {
    return NotHosted(rank);
  }
  return RemoveStaging(*segments);
}

absl::Status ShardStore::RemoveStaging(RankSegments& rank) {
  AwaitPrefault(rank);
  if (rank.spare_bytes > 0) {
    staging_pool_->Drop(rank.spare_bytes, /*reused=*/false);
    rank.spare_bytes = 0;
  }
  absl::Status first_failure;
  rank.staged_bytes.reset();
  rank.staged_grads_bytes.reset();
  for (std::unique_ptr<shm::Segment>* segment :
       {&rank.staged, &rank.staged_grads}) {
    if (*segment == nullptr) continue;
    const std::string name = (*segment)->name();
    segment->reset();
    first_failure.Update(shm::Unlink(name));
  }
  return first_failure;
}

}  // namespace summon::server
