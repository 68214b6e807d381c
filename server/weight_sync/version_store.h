#ifndef SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_
#define SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_

// One node's published versions (docs/api.md#weight-sync): each a copy of
// this node's ranks' parameter shards taken while the model's trainers were
// held out of a step, so a reader sees exactly the parameters after that
// step whatever the trainer does next. At most --max-versions per model are
// kept; the oldest is dropped from the list when a newer one arrives, and
// its memory freed when its last reader lets go.

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
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
  std::atomic<int64_t> bytes{0};         // Held now, read or kept.
  std::atomic<int64_t> unit_copies{0};   // One per unit per version.
  std::atomic<int64_t> versions{0};      // Published here.
  std::atomic<int64_t> peer_bytes_sent{0};      // To readers on other nodes.
  std::atomic<int64_t> peer_bytes_received{0};  // By readers here.
  std::atomic<int64_t> reads{0};                // ReadSlices answered here.

  // Buffers of released versions, kept until the next publish takes them:
  // a copy into memory already faulted in runs at memcpy speed, and in
  // steady training every version has the same size. Those it does not
  // take are freed then (DropSpares), so at most one version's worth waits.
  std::atomic<int64_t> spare_bytes{0};
  absl::Mutex spares_mu;
  std::vector<memory::FreshMemory> spares ABSL_GUARDED_BY(spares_mu);
  // A spare of exactly `bytes`, else fresh memory.
  absl::StatusOr<memory::FreshMemory> Buffer(int64_t bytes);
  void Recycle(memory::FreshMemory buffer);
  void DropSpares();
};

// One version on this node: its ranks' shards, copied.
class VersionSnapshot {
 public:
  VersionSnapshot(std::string model, int64_t version, core::ModelSpec spec,
                  std::shared_ptr<VersionCounters> counters);
  ~VersionSnapshot();
  VersionSnapshot(const VersionSnapshot&) = delete;
  VersionSnapshot& operator=(const VersionSnapshot&) = delete;

  const std::string& model() const { return model_; }
  int64_t version() const { return version_; }
  const core::ModelSpec& spec() const { return spec_; }
  int64_t bytes() const { return bytes_; }

  // Copies `pieces` (all of ranks held here) converted to `dtype`,
  // concatenated in order, to `out`; or each to its dest_element when
  // `scatter`. INVALID_ARGUMENT for a rank, unit or range not held here.
  absl::Status ReadPieces(const std::vector<VersionPiece>& pieces,
                          core::DType dtype, bool scatter,
                          uint8_t* out) const;

 private:
  friend class VersionStore;
  const std::string model_;
  const int64_t version_;
  const core::ModelSpec spec_;
  const std::shared_ptr<VersionCounters> counters_;
  std::map<int, memory::FreshMemory> ranks_;  // Rank -> its units' shards.
  std::vector<int64_t> unit_offsets_;         // In each rank's copy.
  int64_t bytes_ = 0;
};

class VersionStore {
 public:
  VersionStore(ModelRegistry* registry, int max_versions);

  // Copies this node's shards of `model` as `version`, under the model's
  // shards lock; the caller has held the trainers out of a step (the
  // leader's interlock). FAILED_PRECONDITION when `version` is not above
  // every version published here; NOT_FOUND for an unknown model;
  // RESOURCE_EXHAUSTED when the copy's memory cannot be had. Returns its
  // bytes.
  absl::StatusOr<int64_t> Take(const std::string& model, int64_t version);
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
    int64_t newest = -1;           // Newest published, kept or not.
    std::set<int64_t> released;    // Published, then dropped.
  };
  // "kept: 3, 4" or "none kept".
  static std::string KeptText(const ModelVersions& versions);

  ModelRegistry* const registry_;
  const int max_versions_;
  const std::shared_ptr<VersionCounters> counters_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar cond_;  // A version was taken.
  std::map<std::string, ModelVersions> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_VERSION_STORE_H_
