// Pre-faulted spare staging (ShardStore::PrefaultStaging): a writable
// session's open makes each local rank's params staged segment (and, when
// the session has gradients and the rank holds some, its grads staged
// segment) ahead of its writeback and faults its pages in, so that the
// first writeback of a model (or one after the staging pool's idle time)
// does not fault shared memory 4 KiB at a time (~1 s per 256 MiB on this
// project's machine; shared memory gets no transparent huge pages). Each
// segment is a spare exactly like one a commit leaves (no session id, no
// unit flagged staged), so R8 holds and a restart after a crash mid
// pre-fault unlinks it.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"
#include "spdlog/spdlog.h"

namespace summon::server {

void ShardStore::PrefaultStaging(bool grads) {
  absl::MutexLock lock(&mu_);
  ++writable_sessions_;
  if (on_device() || stopping_ || !staging_pool_->options().prefault) return;
  prefault_grads_ = prefault_grads_ || grads;
  if (prefault_running_) {
    // The running pass may have passed the ranks already, or be faulting
    // params only: it makes one more pass for this session.
    prefault_again_ = true;
    return;
  }
  if (prefault_.joinable()) prefault_.join();  // It has ended.
  prefault_running_ = true;
  prefault_ = std::thread([this] { PrefaultSpares(); });
}

void ShardStore::WritableClosed() {
  absl::MutexLock lock(&mu_);
  if (writable_sessions_ > 0) --writable_sessions_;
  if (writable_sessions_ > 0 || stopping_) return;
  const absl::Time now = absl::Now();
  for (RankSegments& rank : ranks_) {
    if (OnlySpares(rank) && !rank.prefaulting) rank.spare_since = now;
  }
  StartSpareReaper();
}

bool ShardStore::prefault_running() const {
  absl::MutexLock lock(&mu_);
  return prefault_running_;
}

void ShardStore::AwaitPrefault(RankSegments& rank) {
  mu_.Await(absl::Condition(
      +[](bool* prefaulting) { return !*prefaulting; }, &rank.prefaulting));
}

void ShardStore::PrefaultSpares() {
  absl::MutexLock lock(&mu_);
  do {
    prefault_again_ = false;
    const bool grads = prefault_grads_;
    prefault_grads_ = false;
    for (RankSegments& rank : ranks_) {
      if (stopping_) break;
      PrefaultRank(rank, grads);
    }
  } while (prefault_again_ && !stopping_);
  prefault_running_ = false;
}

void ShardStore::PrefaultRank(RankSegments& rank, bool grads) {
  // A writeback is staging this rank: it makes what it needs itself.
  if ((rank.staged != nullptr || rank.staged_grads != nullptr) &&
      !OnlySpares(rank)) {
    return;
  }
  // Staging there already (a spare, adopted as it is) is not made again;
  // gradients only for a session that has them, on a rank that has them.
  std::vector<SegmentKind> kinds;
  if (rank.staged == nullptr) kinds.push_back(SegmentKind::kStaged);
  if (grads && rank.grads != nullptr && rank.staged_grads == nullptr) {
    kinds.push_back(SegmentKind::kStagedGrads);
  }
  std::vector<shm::Segment*> made;
  for (SegmentKind kind : kinds) {
    // Null: logged; the writeback makes that staging itself.
    if (shm::Segment* segment = MakeSpare(rank, kind)) made.push_back(segment);
  }
  if (made.empty()) return;
  rank.prefaulting = true;
  mu_.Unlock();
  absl::Status faulted;
  for (shm::Segment* segment : made) {
    if (faulted.ok()) faulted = FaultIn(*segment);
  }
  mu_.Lock();
  rank.prefaulting = false;
  rank.spare_since = absl::Now();
  if (!faulted.ok()) {
    spdlog::debug("staging pre-fault of model '{}' rank {} stopped: {}",
                  model_name_, rank.rank, faulted.ToString());
  }
  // Whatever was faulted stays a spare; the reaper unlinks it when idle.
  if (!stopping_) StartSpareReaper();
}

shm::Segment* ShardStore::MakeSpare(RankSegments& rank, SegmentKind kind) {
  const bool params = kind == SegmentKind::kStaged;
  const char* what = params ? "params" : "grads";
  if (!staging_pool_->KeepPrefault(segment_bytes_)) {
    spdlog::debug(
        "staging pre-fault of model '{}' rank {} {} skipped: the staging "
        "pool ({} bytes held) has no room for {} bytes",
        model_name_, rank.rank, what, staging_pool_->retained_bytes(),
        segment_bytes_);
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<shm::Segment>> created =
      CreateSegment(rank.rank, kind, rank.fingerprint, /*session_id=*/"");
  absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
      created.ok()
          ? BytesOf(rank, **created)
          : absl::StatusOr<std::unique_ptr<ShardMemory>>(created.status());
  if (!bytes.ok()) {
    staging_pool_->Drop(segment_bytes_, /*reused=*/false);
    if (created.ok()) {
      const std::string name = (*created)->name();
      created->reset();
      shm::Unlink(name).IgnoreError();  // The failure below is the news.
    }
    spdlog::debug("staging pre-fault of model '{}' rank {} {} failed: {}",
                  model_name_, rank.rank, what, bytes.status().ToString());
    return nullptr;
  }
  (params ? rank.staged_bytes : rank.staged_grads_bytes) = *std::move(bytes);
  std::unique_ptr<shm::Segment>& slot =
      params ? rank.staged : rank.staged_grads;
  slot = *std::move(created);
  rank.spare_bytes += segment_bytes_;
  return slot.get();
}

absl::Status ShardStore::FaultIn(shm::Segment& segment) const {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t begin = (header_bytes_ + page - 1) / page * page;
  if (absl::Status status =
          segment.Reserve(header_bytes_, segment_bytes_ - header_bytes_);
      !status.ok()) {
    return status;
  }
  // Chunks, so that a stopping store need not wait for a whole shard.
  constexpr int64_t kChunk = int64_t{16} << 20;
  for (int64_t at = begin; at < segment_bytes_; at += kChunk) {
    if (prefault_cancel_.load()) {
      return absl::CancelledError("the store is stopping");
    }
    uint8_t* const chunk = segment.data() + at;
    const int64_t bytes = std::min(kChunk, segment_bytes_ - at);
#ifdef MADV_POPULATE_WRITE
    // Linux 5.14+: maps every page writable without touching its bytes.
    if (madvise(chunk, bytes, MADV_POPULATE_WRITE) == 0) continue;
#endif
    // The pages are fresh (zero): writing a zero to each faults it in.
    for (int64_t offset = 0; offset < bytes; offset += page) {
      *reinterpret_cast<volatile uint8_t*>(chunk + offset) = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::server
