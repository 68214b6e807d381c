#ifndef SUMMON_SERVER_STORE_SHARD_STORE_H_
#define SUMMON_SERVER_STORE_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/model_spec.h"
#include "server/store/segment_names.h"
#include "server/store/shard_memory.h"
#include "server/store/staging_pool.h"

namespace summon::server {
namespace shm {
class Segment;  // server/store/shm_segment.h
}  // namespace shm

enum class AttachMode {
  kCreate,          // ALREADY_EXISTS when any of the model's segments exist.
  kAttach,          // NOT_FOUND when the model's segments are absent.
  kCreateOrAttach,  // Attach when present, create when absent.
};

// One node's shards of one model, in POSIX shared memory: per local rank a
// params segment, an optional grads segment and, during a writeback, a staged
// segment. Shared memory outlives the daemon, so trainers on the node can map
// the shards in place and a restarted summond re-attaches them (and finishes
// a COMMIT from the staged data) instead of losing them.
//
// Segment `/summon-<instance>-<model>-r<rank>-<params|grads|staged>`: a
// header (a multiple of 4 KiB; magic "SUMMONSH", format version, kind, rank,
// unit count, a fingerprint of the rank's layout, the store's incarnation,
// per unit its data offset and generation), then every unit's shard
// (FlatParamLayout::shard_bytes()) at a 64-byte aligned offset. Offsets are
// the same in all three kinds, so one SegmentDescription serves each.
//
// Device placement (a ShardMemoryProvider given at creation, `summond
// --device cuda`): the same segments hold only their headers (generations,
// counters, staging records), and each segment's bytes live in one device
// allocation at the same offsets. Device memory dies with the daemon, so
// device-placed segments found at attach are refused (the model comes back
// MISSING_SHARDS). Callers reach shard bytes through ReadShard/WriteShard/
// StageBytes/OnHost, which copy as the placement needs.
//
// Thread-safe. Pointers into params stay valid for the store's lifetime;
// grads pointers until Destroy(); staging pointers until the rank's staging
// is committed or cleared.
class ShardStore {
 public:
  struct SegmentDescription {
    std::string name;  // For shm_open.
    int64_t size = 0;  // Bytes to map (the header alone for device placement).
    std::vector<int64_t> unit_offsets;
    std::vector<int64_t> unit_bytes;
    bool grads = false;
    int rank = -1;
    // Device placement: the CUDA device and the allocation's IPC handle
    // (unit_offsets apply to the allocation); -1 and empty on the host.
    int device = -1;
    std::string ipc_handle;
    int64_t device_bytes = 0;
  };

  // Host-addressable shard bytes for bulk work (seeded init, checkpoint
  // load and save, checksums). Host placement hands out the shards
  // themselves; device placement copies every local rank's bytes to host
  // memory (when asked to read) and writes them back on Flush(). Holds no
  // lock: callers hold the model's shard lock around it.
  class HostShards {
   public:
    HostShards() = default;
    HostShards(HostShards&&) = default;
    HostShards& operator=(HostShards&&) = default;
    // Rank::base points into Rank::copy: moving keeps it valid, copying not.
    HostShards(const HostShards&) = delete;
    HostShards& operator=(const HostShards&) = delete;

    // Start of `rank`'s shard of `unit`; nullptr for a rank not hosted, a
    // unit out of range or (grads) a rank without gradients.
    uint8_t* Shard(int rank, int unit) const;
    // Device placement: copies the bytes back to the device. No-op on host.
    absl::Status Flush();

   private:
    friend class ShardStore;
    struct Rank {
      int rank = -1;
      uint8_t* base = nullptr;
      ShardMemory* memory = nullptr;  // Device placement: where to flush.
      std::vector<uint8_t> copy;      // Device placement: the host copy.
    };
    std::vector<Rank> ranks_;
    std::vector<int64_t> unit_offsets_;
  };

  // A rank's staged writeback as recorded in its staged segment's header.
  struct StagedWriteback {
    std::string session_id;
    std::map<int, uint64_t> target_generations;  // Staged unit -> generation.
  };

  // Longest session id a staged segment records.
  static constexpr size_t kMaxSessionIdBytes = 128;

  // Maps the params segments of `local_ranks` (global rank numbers this node
  // hosts) for `model`, creating zero-filled ones or attaching existing ones
  // per `mode`, and attaches any existing grads and staged segments. An
  // existing segment is used only when its header matches the model (magic,
  // format version, rank, layout fingerprint, one incarnation across ranks);
  // otherwise FAILED_PRECONDITION names it. A node holding params for only
  // some of the ranks is FAILED_PRECONDITION too (see RemoveSegments).
  // INVALID_ARGUMENT for a bad instance ([A-Za-z0-9]{1,64}), model name or
  // rank list; RESOURCE_EXHAUSTED when shared memory runs out.
  // With `device` (not owned; outlives the store) the shard bytes are
  // placed in its memory (see the class comment). `staging_pool` decides
  // how long and how much spare staging is kept after a commit (the node's,
  // shared by its models); null: a pool of this store's own with
  // StagingPool's default options.
  static absl::StatusOr<std::unique_ptr<ShardStore>> CreateOrAttach(
      const std::string& instance, const std::string& model_name,
      const core::ModelSpec& model, const std::vector<int>& local_ranks,
      AttachMode mode, const ShardMemoryProvider* device = nullptr,
      std::shared_ptr<StagingPool> staging_pool = nullptr);

  // Names alone, no store (defined in segment_names.cc): a segment's name,
  // "/summon-<instance>-<model>-r<rank>-<KindSuffix(kind)>".
  static std::string SegmentName(absl::string_view instance,
                                 absl::string_view model_name, int rank,
                                 SegmentKind kind);
  // Every segment of `instance` in /dev/shm (as "/name"), sorted.
  static std::vector<std::string> ListSegments(absl::string_view instance);
  // Unlinks every segment of one model found in /dev/shm, whichever ranks
  // and layout they belong to: the way out when CreateOrAttach refuses
  // leftovers, and model deletion without an attached store.
  static absl::Status RemoveSegments(absl::string_view instance,
                                     absl::string_view model_name);

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;
  // Unmaps without unlinking, so that a restarted daemon can re-attach.
  ~ShardStore();

  // True when the params were found in shared memory rather than created.
  bool attached() const { return attached_; }
  const std::string& name() const { return model_name_; }
  // Hosted global ranks, ascending.
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  int num_units() const { return static_cast<int>(unit_offsets_.size()); }

  // True for device placement.
  bool on_device() const { return device_ != nullptr; }

  // Start of `rank`'s shard of `unit`; nullptr for a rank not hosted here or
  // a unit out of range (and after Destroy()), and always for device
  // placement (use ReadShard/WriteShard/OnHost).
  uint8_t* ParamShard(int rank, int unit) const;
  // Like ParamShard; also nullptr while the rank has no grads.
  uint8_t* GradShard(int rank, int unit) const;
  bool HasGrads(int rank) const;
  // Creates `rank`'s zero-filled grads segment unless it has one.
  absl::Status EnsureGrads(int rank);

  // Copies [offset, offset + bytes) of `rank`'s params (or grads) shard of
  // `unit` to or from host memory, whatever the placement. INVALID_ARGUMENT
  // for a rank, unit or range not held here (grads: FAILED_PRECONDITION
  // when the rank has none).
  absl::Status ReadShard(int rank, int unit, bool grads, int64_t offset,
                         void* to, int64_t bytes) const;
  absl::Status WriteShard(int rank, int unit, bool grads, int64_t offset,
                          const void* from, int64_t bytes);
  // ShardMemory::AccumulateWatch over `numel` elements of `dtype` at byte
  // `offset` of `rank`'s params (or grads) shard of `unit`: a watch's share
  // computed where the bytes are (CUDA kernels for shards on a GPU). Errors
  // as ReadShard's, then the memory's.
  absl::Status AccumulateWatchShard(
      int rank, int unit, bool grads, int64_t offset, core::DType dtype,
      int64_t numel, const std::optional<core::HistogramRange>& range,
      core::WatchPartial* partial) const;
  // ReadShard into other shard memory (a session copy on a GPU of this
  // node), at `to_offset`: device to device, no host bounce.
  absl::Status CopyShardTo(int rank, int unit, bool grads, int64_t offset,
                           ShardMemory& to, int64_t to_offset,
                           int64_t bytes) const;
  // Device placement: `bytes` of zero-filled memory from the store's
  // provider on the GPU of local `rank` (a session copy beside the shards).
  // FAILED_PRECONDITION on host placement, INVALID_ARGUMENT for a rank not
  // held here.
  absl::StatusOr<std::unique_ptr<ShardMemory>> AllocateBeside(
      int rank, int64_t bytes) const;
  // The CUDA device ordinal local `rank`'s shards are on; -1 on host
  // placement or for a rank not held here.
  int DeviceOf(int rank) const;
  // See HostShards. `read`: fill the host copy with the current bytes (not
  // needed when every byte will be overwritten before Flush()).
  absl::StatusOr<HostShards> OnHost(bool grads, bool read) const;
  // Every local rank's parameter shards rewritten in one go (a checkpoint
  // load): `write` fills them through OnHost's bytes, which are flushed to
  // the device, then every unit's generation moves on, and its
  // external-write counter with it when `external` (R18). Returns what
  // `write` returned; `generations` receives each unit's new generation.
  // Nothing moves when `write` or the flush fails.
  absl::StatusOr<int64_t> RewriteParams(
      const std::function<absl::StatusOr<int64_t>(const HostShards&)>& write,
      bool external, std::vector<uint64_t>* generations);

  // A unit's generation (docs/design.md#generations-and-external-writes),
  // kept in every local rank's params header. On attach, ranks that
  // disagree (a daemon killed between two header updates) are set to the
  // highest value: generations only move forward, and the higher one makes
  // any older gather stale (R7). A unit out of range reads 0 and is never
  // written.
  uint64_t Generation(int unit) const;
  // Returns the new generation.
  uint64_t BumpGeneration(int unit);
  void SetGeneration(int unit, uint64_t generation);
  // R18: how often something other than the unit's trainer changed it (a
  // commit of a writeback, a load), kept beside the generation in every
  // local rank's params header and reconciled to the highest on attach.
  uint64_t ExternalWrites(int unit) const;
  // Moves the unit's counter by one.
  void NoteExternalWrite(int unit);
  // Counts every change of a generation or external-write counter (and
  // Destroy); AwaitChange returns the count once it differs from `seen`, or
  // at the timeout. For watchers (Trainer.WatchUnits).
  uint64_t ChangeCount() const;
  uint64_t AwaitChange(uint64_t seen, absl::Duration timeout) const;
  // Random per model creation, in every segment header.
  uint64_t incarnation() const { return incarnation_; }
  // Names of mapped segments whose name is gone from /dev/shm (another
  // process unlinked it): the data lives only as long as this mapping.
  std::vector<std::string> UnlinkedSegments() const;

  // The params segment and, when present, the grads segment of `rank`, for
  // the Trainer MapShards RPC; empty for a rank not hosted here.
  std::vector<SegmentDescription> Describe(int rank) const;
  // Bytes of every mapped segment (params, grads, staged).
  int64_t TotalBytes() const;
  // Unlinks and unmaps every segment (the model is deleted); the store is
  // empty afterwards. Returns the first failure but tries every segment.
  absl::Status Destroy();

  // Two-phase writeback, PREPARE: `rank`'s staging buffer for `unit` in the
  // writeback of `session_id`, which will give the unit `target_generation`.
  // The staged segment is created on first use; the first call for a unit
  // copies the unit's current params into the buffer, so the caller writes
  // only the slices it changes. Byte ranges the caller is about to write in
  // full (`overwritten`: [begin, end) within the unit's shard, sorted and
  // disjoint) are left out of that copy. FAILED_PRECONDITION while the
  // rank's staging holds another session, or this unit with another target
  // generation.
  using ByteRanges = std::vector<std::pair<int64_t, int64_t>>;
  absl::StatusOr<uint8_t*> StagingShard(int rank, int unit,
                                        absl::string_view session_id,
                                        uint64_t target_generation,
                                        const ByteRanges& overwritten = {});
  // The same for `rank`'s gradients (FAILED_PRECONDITION when it has none):
  // staged in shared memory too, so a COMMIT finished after a crash writes
  // parameters and gradients alike.
  absl::StatusOr<uint8_t*> StagingGradShard(int rank, int unit,
                                            absl::string_view session_id,
                                            uint64_t target_generation,
                                            const ByteRanges& overwritten = {});
  // Any placement: prepares the staging buffer as StagingShard (or
  // StagingGradShard) does and copies `bytes` host bytes from `from` to
  // [offset, offset + bytes) of it. (StagingShard and StagingGradShard are
  // FAILED_PRECONDITION for device placement: no host pointer exists.)
  absl::Status StageBytes(int rank, int unit, bool grads,
                          absl::string_view session_id,
                          uint64_t target_generation,
                          const ByteRanges& overwritten, int64_t offset,
                          const void* from, int64_t bytes);
  // StageBytes from other shard memory (a session copy on a GPU) at
  // `from_offset`: device to device.
  absl::Status StageFrom(int rank, int unit, bool grads,
                         absl::string_view session_id,
                         uint64_t target_generation,
                         const ByteRanges& overwritten, int64_t offset,
                         const ShardMemory& from, int64_t from_offset,
                         int64_t bytes);
  // What `rank`'s staged segment records; nullopt when it has none.
  std::optional<StagedWriteback> Staged(int rank) const;
  // COMMIT: copies every unit staged for `session_id` (on any local rank)
  // into its params shard, sets those units' generations to their targets
  // and moves their external-write counters (a writeback is external),
  // then marks the staged segments spare (see StagingPool).
  // Idempotent until its end, so a daemon killed midway re-runs it after
  // re-attaching. NOT_FOUND when nothing here is staged for `session_id`.
  absl::Status CommitStaging(absl::string_view session_id);
  // A committed rank's staged segments stay mapped, their pages allocated,
  // for the next writeback to reuse (no fresh zeroed shared memory, no page
  // faults: the P7 lever) while the staging pool has room, until they have
  // been idle for its max_idle; then they are unlinked, so an idle daemon's
  // /dev/shm returns to its shards alone. The store's destructor unlinks
  // spares at once; a restart drops any a killed daemon left.
  const StagingPool& staging_pool() const { return *staging_pool_; }
  // Starts (at most one at a time, on a thread of the store's) making a
  // spare params staged segment for each local rank that has none, and,
  // with `grads` (the session has gradients), a spare grads staged segment
  // for each local rank that holds gradients and has none; then faulting
  // their pages in (MADV_POPULATE_WRITE, else a write per page): called
  // when a writable session opens, so that its writeback adopts faulted
  // staging even the first time. A call while one runs makes it pass over
  // the ranks once more. A spare holds no session and no staged unit (R8
  // holds; a restart unlinks it). Skipped, segment by segment, when the
  // pool refuses it (StagingPool::KeepPrefault), for ranks a writeback is
  // staging, for device placement and when the pool's `prefault` is off. A
  // writeback or clear that reaches a rank mid-fault waits for the fault to
  // finish.
  void PrefaultStaging(bool grads);
  // Pairs with PrefaultStaging (one call per writable session, pre-faulted
  // or not): while any writable session is open no spare of the store is
  // reaped; the last close starts their idle time.
  void WritableClosed();
  // Whether a pre-fault is running (tests wait on it).
  bool prefault_running() const;
  // Drops `rank`'s staged data (abort, or after a commit elsewhere).
  absl::Status ClearStaging(int rank);

 private:
  struct RankSegments {
    int rank = -1;
    int local_index = -1;  // Position in local_ranks_.
    uint64_t fingerprint = 0;
    std::unique_ptr<shm::Segment> params;
    std::unique_ptr<shm::Segment> grads;         // Null: no grads.
    std::unique_ptr<shm::Segment> staged;        // Null: nothing staged.
    std::unique_ptr<shm::Segment> staged_grads;  // Null: no grads staged.
    // The bytes of each segment above (its own mapping on the host, a
    // device allocation otherwise); null exactly when the segment is.
    std::unique_ptr<ShardMemory> params_bytes;
    std::unique_ptr<ShardMemory> grads_bytes;
    std::unique_ptr<ShardMemory> staged_bytes;
    std::unique_ptr<ShardMemory> staged_grads_bytes;
    // When the staged segments became spare (their session committed).
    absl::Time spare_since = absl::InfinitePast();
    // What the staging pool counts for this rank's spares (0: none).
    int64_t spare_bytes = 0;
    // The pre-fault is writing this rank's staged segment, outside mu_:
    // nothing else touches it (or unlinks it) until this is false.
    bool prefaulting = false;
  };

  ShardStore(std::string instance, std::string model_name,
             std::vector<int> local_ranks, const ShardMemoryProvider* device,
             std::shared_ptr<StagingPool> staging_pool);

  // The memory holding `segment`'s shard bytes for `rank` (see RankSegments).
  absl::StatusOr<std::unique_ptr<ShardMemory>> BytesOf(
      const RankSegments& rank, const shm::Segment& segment) const;
  // The shard memory of `kind` for a rank, or nullptr.
  static ShardMemory* Bytes(const RankSegments& rank, SegmentKind kind);
  // Checks a rank, unit and range within one unit's shard.
  absl::StatusOr<ShardMemory*> ShardBytes(int rank, int unit, bool grads,
                                          int64_t offset, int64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status CreateAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `params` in ranks_ order.
  absl::Status AttachAll(std::vector<std::unique_ptr<shm::Segment>> params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Attaches the optional segment of `kind` for `ranks_[index]`; removes
  // one whose creation never finished (it never held data).
  absl::Status AttachOptional(size_t index, SegmentKind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<shm::Segment>> CreateSegment(
      int rank, SegmentKind kind, uint64_t fingerprint,
      absl::string_view session_id) const;
  absl::Status VerifySegment(const shm::Segment& segment, int rank,
                             SegmentKind kind, uint64_t fingerprint) const;
  void ReconcileGenerations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetGenerationLocked(int unit, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetExternalWritesLocked(int unit, uint64_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StageBytes' and StageFrom's checks and staging; `fill` writes the bytes
  // into the staging memory at the given offset.
  absl::Status StageWith(
      int rank, int unit, bool grads, absl::string_view session_id,
      uint64_t target_generation, const ByteRanges& overwritten, int64_t offset,
      int64_t bytes,
      const std::function<absl::Status(ShardMemory&, int64_t)>& fill);
  // The rank's staging memory with `unit` prepared; the unit's bytes start
  // at unit_offsets_[unit] in it.
  absl::StatusOr<ShardMemory*> Staging(RankSegments& rank, SegmentKind kind,
                                       int unit, absl::string_view session_id,
                                       uint64_t target_generation,
                                       const ByteRanges& overwritten)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RankSegments*> StagingRank(int rank, int unit, bool grads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RemoveStaging(RankSegments& rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the rank's staged segments for reuse: no session id, no unit
  // staged. Starts the spare reaper; unlinks them at once instead when the
  // staging pool has no room.
  void MakeStagingSpare(RankSegments& rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool IsSpare(const shm::Segment& staged);
  // The rank has staged segments and every one of them is spare.
  static bool OnlySpares(const RankSegments& rank);
  // Unlinks spare staged segments idle past the pool's max_idle; returns when
  // none is left or the store is being destroyed.
  void ReapSpareStaging();
  // Starts the reaper unless it runs.
  void StartSpareReaper() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until no pre-fault writes `rank`'s staged segment.
  void AwaitPrefault(RankSegments& rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pre-fault thread's body (see PrefaultStaging) and its page faulting
  // of one segment, run without mu_.
  void PrefaultSpares();
  // One rank's pass: makes the spares it lacks (MakeSpare), then faults
  // them with mu_ released and the rank marked prefaulting.
  void PrefaultRank(RankSegments& rank, bool grads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates, maps and counts (pool and rank.spare_bytes) a spare staged
  // segment of `kind` for `rank`; null, logged, when the pool has no room
  // or the segment cannot be made.
  shm::Segment* MakeSpare(RankSegments& rank, SegmentKind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FaultIn(shm::Segment& segment) const;
  absl::Status NotHosted(int rank) const;
  const RankSegments* FindRank(int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RankSegments* FindRank(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ValidUnit(int unit) const { return unit >= 0 && unit < num_units(); }

  const std::string instance_;
  const std::string model_name_;
  const std::vector<int> local_ranks_;
  const ShardMemoryProvider* const device_;          // Null: host placement.
  const std::shared_ptr<StagingPool> staging_pool_;  // Never null.
  // Identical in every segment of the store.
  int64_t header_bytes_ = 0;
  int64_t segment_bytes_ = 0;
  std::vector<int64_t> unit_offsets_;
  std::vector<int64_t> unit_bytes_;
  // Random at creation, recorded in every segment: segments left over from
  // an earlier model of the same name and layout are never mixed in.
  uint64_t incarnation_ = 0;
  bool attached_ = false;

  mutable absl::Mutex mu_;
  // One per local rank, in local_ranks_ order; empty after Destroy().
  std::vector<RankSegments> ranks_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool spare_reaper_running_ ABSL_GUARDED_BY(mu_) = false;
  std::thread spare_reaper_;  // Started and joined with mu_ held.
  bool prefault_running_ ABSL_GUARDED_BY(mu_) = false;
  // Asked of the running or next pre-fault: gradients' staging too; one
  // more pass over the ranks (a session opened while it ran).
  bool prefault_grads_ ABSL_GUARDED_BY(mu_) = false;
  bool prefault_again_ ABSL_GUARDED_BY(mu_) = false;
  int writable_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread prefault_;  // Started and joined with mu_ held.
  // Set by the destructor: a running pre-fault stops between chunks.
  std::atomic<bool> prefault_cancel_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_STORE_SHARD_STORE_H_
