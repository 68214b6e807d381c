#ifndef SUMMON_SERVER_STORE_STAGING_POOL_H_
#define SUMMON_SERVER_STORE_STAGING_POOL_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace summon::server {

// How much spare staging a node keeps, and for how long (summond
// --staging-pool-bytes, --staging-pool-idle); shared by every model's
// ShardStore on the node.
//
// A commit leaves each rank's `-staged` segment spare: mapped, its pages
// allocated, holding nothing a restart would act on (R8 holds: a spare has
// no session id and no unit flagged staged). The next writeback of the model
// adopts it instead of creating, fallocating and page-faulting fresh shared
// memory. Staging must stay in shared memory (it survives a daemon crash),
// where transparent huge pages are usually off (shmem_enabled `never`), so a
// fresh staged segment is faulted 4 KiB at a time: on this project's
// machine about 1 s per 256 MiB. Keeping spares is what makes a writeback
// after a pause cost what a back-to-back one costs.
//
// The pool counts each spare rank's staged segments at their full size (the
// upper bound of the shm they hold: only the units a writeback staged are
// allocated). A spare that would take the pool past max_bytes is unlinked
// at once instead; spares idle longer than max_idle are unlinked by the
// store's reaper. Thread-safe.
class StagingPool {
 public:
  struct Options {
    // 0: keep none (every commit unlinks its staged segments).
    int64_t max_bytes = int64_t{1} << 30;
    absl::Duration max_idle = absl::Minutes(10);
    // Pre-fault a spare for each local rank when a writable session opens
    // (ShardStore::PrefaultStaging), so that even the first writeback of a
    // model, or one after max_idle, finds faulted staging.
    bool prefault = true;
    // A pre-faulted spare is refused when it would take the pool past this
    // too (summond passes --memory-budget, R9); 0: max_bytes alone.
    int64_t prefault_limit_bytes = 0;
  };

  StagingPool() : StagingPool(Options()) {}
  explicit StagingPool(const Options& options) : options_(options) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  const Options& options() const { return options_; }

  // Takes `bytes` of spare staging into the pool; false (and nothing
  // counted) when they would take it past max_bytes.
  bool Keep(int64_t bytes);
  // Keep for a pre-faulted spare: also within prefault_limit_bytes. Counts
  // a refusal when there is no room.
  bool KeepPrefault(int64_t bytes);
  // Gives back what Keep took: the spare was unlinked, or adopted by a
  // writeback (`reused`).
  void Drop(int64_t bytes, bool reused);

  // Bytes of spare staging held now.
  int64_t retained_bytes() const { return retained_.load(); }
  // Writebacks that adopted a spare instead of creating staging.
  int64_t reuses() const { return reuses_.load(); }
  // Spares pre-faulted, and pre-faults refused for want of room.
  int64_t prefaults() const { return prefaults_.load(); }
  int64_t prefault_refusals() const { return prefault_refusals_.load(); }

 private:
  const Options options_;
  std::atomic<int64_t> retained_{0};
  std::atomic<int64_t> reuses_{0};
  std::atomic<int64_t> prefaults_{0};
  std::atomic<int64_t> prefault_refusals_{0};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_STORE_STAGING_POOL_H_
