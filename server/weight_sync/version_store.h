#ifndef SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_
#define SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_

// One node's published versions (docs/api.md#weight-sync), copy on write: a
// version is taken while the model's trainers are held out of a step and
// refers to this node's live shards (their generations recorded); a unit is
// copied into it only when a writer is about to change that unit while the
// version is still kept or read (ModelRegistry::BeforeShardsWrite: a rank's
// move into OPTIMIZER, a writeback's COMMIT, a checkpoint load, a moved
// generation). A reader sees exactly the parameters after the published
// step whatever the trainer does next: it reads a live unit under the
// version's lock, and the copy before a write takes that lock exclusively,
// so the writer (who waits for the copy) cannot start while it reads. At
// most --max-versions per model are kept; the oldest is dropped from the
// list when a newer one arrives, and its copies freed when its last reader
// lets go. A version taken with `copy_ahead` (the trainers' own end-of-step
// publish) is copied unit by unit by a background thread right away, so
// that the next optimizer step, which would copy every unit anyway, finds
// them copied and the trainer's move into OPTIMIZER does not wait for it.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/model_spec.h"
#include "memory/fresh_memory.h"
#include "server/model/model_registry.h"
#include "server/weight_sync/slice_plan.h"

namespace summon::server {

// Counters of a node's versions, shared with its snapshots (which outlive
// their place in the store while read).
struct VersionCounters {
  std::atomic<int64_t> bytes{0};  // Copies held now, read or kept.
  // Units copied before a write or ahead of it: at most one per unit per
  // version.
  std::atomic<int64_t> unit_copies{0};
  // Rank units copied by the background thread (copy_ahead), not on a
  // writer's path.
  std::atomic<int64_t> copied_ahead{0};
  std::atomic<int64_t> versions{0};             // Published here.
  std::atomic<int64_t> peer_bytes_sent{0};      // To readers on other nodes.
  std::atomic<int64_t> peer_bytes_received{0};  // By readers here.
  std::atomic<int64_t> reads{0};                // ReadSlices answered here.

  // Copies of released versions, kept for the next version's copies: a copy
  // into memory already faulted in runs at memcpy speed, and in steady
  // training every version copies the same units. Those not taken by the
  // next publish are freed then (DropSpares), so at most one version's
  // worth waits.
  std::atomic<int64_t> spare_bytes{0};
  absl::Mutex spares_mu;
  std::vector<memory::FreshMemory> spares ABSL_GUARDED_BY(spares_mu);
  // A spare of exactly `bytes`, else fresh memory.
  absl::StatusOr<memory::FreshMemory> Buffer(int64_t bytes);
  void Recycle(memory::FreshMemory buffer);
  void DropSpares();
};

// One version on this node: its ranks' shards, live until copied.
class VersionSnapshot {
 public:
  VersionSnapshot(std::string model, int64_t version,
                  std::shared_ptr<ModelEntry> entry,
                  std::shared_ptr<VersionCounters> counters);
  ~VersionSnapshot();
  VersionSnapshot(const VersionSnapshot&) = delete;
  VersionSnapshot& operator=(const VersionSnapshot&) = delete;

  const std::string& model() const { return model_; }
  int64_t version() const { return version_; }
  const core::ModelSpec& spec() const { return spec_; }
  // Of its copies (0 while every unit is live).
  int64_t bytes() const;
  // Of this node's ranks' shards, copied or not.
  int64_t shard_bytes() const { return shard_bytes_; }

  // Copies `pieces` (all of ranks held here) converted to `dtype`,
  // concatenated in order, to `out`; or each to its dest_element when
  // `scatter`. INVALID_ARGUMENT for a rank, unit or range not held here;
  // FAILED_PRECONDITION once the model was deleted (for a live unit);
  // ABORTED for a live unit whose generation moved without its copy (a
  // writer that did not announce itself: refused, never a mix).
  absl::Status ReadPieces(const std::vector<VersionPiece>& pieces,
                          core::DType dtype, bool scatter, uint8_t* out) const;
  // `piece`'s bytes in this version's own copy of its unit, when there is
  // one and it is kept in `dtype`; nullopt otherwise (a live unit, a
  // conversion). A copy is only ever added and is freed with the snapshot,
  // so the bytes stay as they are while the caller holds this snapshot: a
  // sender may reference them instead of copying. ReadPieces' refusals for
  // a piece not held here.
  absl::StatusOr<std::optional<absl::string_view>> CopiedBytes(
      const VersionPiece& piece, core::DType dtype) const;

 private:
  friend class VersionStore;
  // Copies `write`'s live units; `shards_mu` held by the caller.
  absl::Status Preserve(const ModelRegistry::ShardsWrite& write)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The background copy of one live unit of `rank` (copy_ahead); the
  // caller holds `entry.shards_mu`. Nothing when it is copied already, the
  // version is cut off, or its generation moved (then Preserve copied it
  // before the write, or an unannounced writer changed it and reads of it
  // are refused anyway). True when it copied.
  absl::StatusOr<bool> CopyAhead(ModelEntry& entry, int rank, int unit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Copies (rank, unit) into copies_; `shards_mu` and mu_ held.
  absl::Status CopyUnitLocked(ModelEntry& entry, int rank, int unit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // INVALID_ARGUMENT naming a rank, unit or range not held here.
  absl::Status CheckHeld(const VersionPiece& piece) const;
  absl::Status ReadPiecesLocked(const std::vector<VersionPiece>& pieces,
                                core::DType dtype, bool scatter,
                                uint8_t* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string model_;
  const int64_t version_;
  const core::ModelSpec spec_;
  const std::weak_ptr<ModelEntry> entry_;
  const std::shared_ptr<VersionCounters> counters_;
  const std::vector<int> ranks_;             // Local ranks, as published.
  const std::vector<uint64_t> generations_;  // Per unit, as published.
  int64_t shard_bytes_ = 0;
  mutable absl::Mutex mu_;
  // (rank, unit) -> its copy; absent: live.
  std::map<std::pair<int, int>, memory::FreshMemory> copies_
      ABSL_GUARDED_BY(mu_);
  std::vector<bool> unit_counted_ ABSL_GUARDED_BY(mu_);  // In unit_copies.
  // Why its live units can no longer be read (the model deleted, a copy
  // without memory); empty while they can.
  std::string cut_off_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class VersionStore {
 public:
  // Installs itself as the registry's BeforeShardsWrite (removed again by
  // the destructor).
  VersionStore(ModelRegistry* registry, int max_versions);
  ~VersionStore();
  VersionStore(const VersionStore&) = delete;
  VersionStore& operator=(const VersionStore&) = delete;

  // Records this node's shards of `model` as `version` (nothing copied);
  // the caller has held the trainers out of a step (the leader's
  // interlock). FAILED_PRECONDITION when `version` is not above every
  // version published here; NOT_FOUND for an unknown model. Returns the
  // bytes it covers (its ranks' shards). `copy_ahead`: the background
  // thread then copies its units (see the top of this file), in the spare
  // buffers of the version this one released when there are.
  absl::StatusOr<int64_t> Take(const std::string& model, int64_t version,
                               bool copy_ahead = false);
  // Until every version queued for copy_ahead so far is copied (tests).
  void WaitCopiedAhead() ABSL_LOCKS_EXCLUDED(copy_mu_);
  // Undoes Take(model, version) when the publish failed on another node:
  // the version is kept no longer (readers holding it finish), readers
  // asking for it are told `why`, and a later publish may use its number.
  // A version Take released to make room stays released. No-op for a
  // version not kept here.
  void RollBack(const std::string& model, int64_t version,
                const std::string& why);
  // Every version of `model` still kept or read copies `write`'s live
  // units (the registry's hook; `shards_mu` held). A copy that cannot get
  // memory is logged and its version cut off (its later reads fail), so
  // that the writer is never held.
  void BeforeShardsWrite(ModelEntry& model,
                         const ModelRegistry::ShardsWrite& write);
  // A kept version, held for reading (its memory lives while this does).
  // NOT_FOUND for one never published here, FAILED_PRECONDITION for one
  // released, each naming the versions kept.
  absl::StatusOr<std::shared_ptr<const VersionSnapshot>> Acquire(
      const std::string& model, int64_t version) const;
  // The newest version >= `min_version` once there is one;
  // DEADLINE_EXCEEDED at `deadline`.
  absl::StatusOr<int64_t> Wait(const std::string& model, int64_t min_version,
                               absl::Time deadline) const;
  std::vector<int64_t> Kept(const std::string& model) const;
  int max_versions() const { return max_versions_; }
  const VersionCounters& counters() const { return *counters_; }
  VersionCounters& counters() { return *counters_; }

 private:
  struct ModelVersions {
    // Versions of another incarnation of the model (deleted, created again)
    // are dropped at the next Take.
    std::weak_ptr<ModelEntry> entry;
    std::map<int64_t, std::shared_ptr<const VersionSnapshot>> kept;
    // Every version not yet destroyed (kept, or released and still read).
    std::vector<std::weak_ptr<VersionSnapshot>> alive;
    int64_t newest = -1;         // Newest published, kept or not.
    std::set<int64_t> released;  // Published, then dropped.
    std::map<int64_t, std::string> rolled_back;  // Why, by version.
  };
  // "kept: 3, 4" or "none kept".
  static std::string KeptText(const ModelVersions& versions);
  // The background thread: copies each queued version's live units, one
  // unit at a time, oldest version first.
  void CopyLoop() ABSL_LOCKS_EXCLUDED(copy_mu_);
  void CopyVersionAhead(const std::shared_ptr<VersionSnapshot>& version);

  ModelRegistry* const registry_;
  const int max_versions_;
  const std::shared_ptr<VersionCounters> counters_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar cond_;  // A version was taken.
  std::map<std::string, ModelVersions> models_ ABSL_GUARDED_BY(mu_);
  // copy_ahead's queue and thread (started by the first such Take).
  absl::Mutex copy_mu_;
  absl::CondVar copy_cond_;  // Queued, copied, or stopping.
  std::deque<std::weak_ptr<VersionSnapshot>> to_copy_ ABSL_GUARDED_BY(copy_mu_);
  bool copying_ ABSL_GUARDED_BY(copy_mu_) = false;  // One is being copied.
  bool stopping_ ABSL_GUARDED_BY(copy_mu_) = false;
  std::thread copier_;  // Started under copy_mu_, joined by the destructor.
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_
