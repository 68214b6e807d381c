#ifndef SUMMON_SERVER_WEIGHT_SYNC_WEIGHT_SYNC_H_
#define SUMMON_SERVER_WEIGHT_SYNC_WEIGHT_SYNC_H_

// Weight sync for inference engines (docs/api.md#weight-sync): Publish on
// the leader (the trainers held out of a step while every node copies its
// shards), WaitVersion and ReadSlices on any node. A read plans every entry
// first (so a bad one fails the call before any byte is sent), then fills
// each entry from this node's snapshot and, for ranks on other nodes, only
// the elements the box needs, converted there.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "memory/parallel_copy.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"
#include "server/weight_sync/slice_destination.h"
#include "server/weight_sync/slice_plan.h"
#include "server/weight_sync/version_nodes.h"
#include "server/weight_sync/version_store.h"

namespace summon::server {

struct PublishResult {
  int64_t version = 0;
  std::vector<int64_t> kept;  // On this node, oldest first.
  int64_t bytes = 0;          // On every node together.
};

// Every entry of a read checked and placed: entry i's bytes start at
// offsets[i] (16-byte aligned) of the packed answer.
struct PlannedRead {
  std::shared_ptr<const VersionSnapshot> snapshot;
  std::vector<SlicePlan> entries;
  std::vector<int64_t> offsets;
  int64_t total_bytes = 0;
  int64_t slice_bytes = 0;
};

inline constexpr int64_t kSliceAlignment = 16;

class WeightSync {
 public:
  struct Options {
    int node = 0;                                 // This node's rank.
    int64_t max_read_bytes = int64_t{64} << 30;  // One ReadSlices' answer.
    // Other nodes' pieces are fetched in batches of at most this many
    // bytes, up to `fetches_in_flight` at once (Peer.NodeReadVersion
    // streams), while this node copies its own: the other nodes read,
    // convert and send while this one receives, and a large entry's bytes
    // come over several streams instead of one after the other.
    int64_t fetch_batch_bytes = int64_t{8} << 20;
    int fetches_in_flight = 4;
    // This node's pieces of a read are copied by up to `local_copiers`
    // threads at once, each taking at least `copier_min_bytes` (a thread
    // start costs tens of microseconds).
    int local_copiers = memory::ParallelCopyThreads();
    int64_t copier_min_bytes = memory::kParallelCopyMinBytes / 2;
  };
  WeightSync(ModelRegistry* registry, SessionManager* sessions,
             VersionStore* store, VersionNodes* nodes, Options options)
      : registry_(registry),
        sessions_(sessions),
        store_(store),
        nodes_(nodes),
        options_(options) {}

  // The leader's: INVALID_ARGUMENT for a negative step; the interlock's
  // refusals (SessionManager::LockForSnapshot); the nodes' failures.
  absl::StatusOr<PublishResult> Publish(const std::string& model,
                                        int64_t step);
  // Publish with the interlock already held by the caller (the trainers'
  // end-of-step report that ended the step: SessionManager::ReportPhase's
  // publish hold); `copy_ahead` for every node's VersionStore::Take.
  absl::StatusOr<PublishResult> PublishHeld(const std::string& model,
                                            int64_t step, bool copy_ahead);
  absl::StatusOr<int64_t> Wait(const std::string& model, int64_t min_step,
                               absl::Time deadline) const {
    return store_->Wait(model, min_step, deadline);
  }
  // Errors name the entry ("entry 2 ('layers.0.w'): ..."): the slice plan's,
  // and RESOURCE_EXHAUSTED once the packed answer passes max_read_bytes.
  absl::StatusOr<PlannedRead> Plan(const std::string& model, int64_t version,
                                   const std::vector<SliceRequest>& entries);
  // Entries [first, last) of the packed answer into `out`, which holds
  // its bytes from offsets[first] to End(read, last - 1): entry i at
  // out + offsets[i] - offsets[first], the alignment gaps zero.
  // `peer_bytes` grows by what came from other nodes. On a failure it
  // stops taking new fetches, waits for those in flight (nothing writes
  // into `out` after it returns) and returns the failure of the lowest
  // entry, naming it; what was written stays: the caller says whether the
  // bytes are whole.
  absl::Status FillRange(const PlannedRead& read, int first, int last,
                         uint8_t* out, int64_t* peer_bytes);
  // The whole packed answer (total_bytes) into `out`.
  absl::Status FillAll(const PlannedRead& read, uint8_t* out,
                       int64_t* peer_bytes) {
    return FillRange(read, 0, static_cast<int>(read.entries.size()), out,
                     peer_bytes);
  }
  // The whole packed answer into `destination`, one window of whole
  // entries at a time (about stream_window_bytes(); an entry larger than
  // that is one of its own): each filled in host memory (FillRange, gaps
  // zero), then written at its offset. The first failure, a Write's
  // included, stops it.
  absl::Status Deliver(const PlannedRead& read, SliceDestination& destination,
                       int64_t* peer_bytes);
  // Where entry `entry`'s bytes and its alignment gap end.
  static int64_t End(const PlannedRead& read, int entry) {
    return entry + 1 < static_cast<int>(read.entries.size())
               ? read.offsets[entry + 1]
               : read.total_bytes;
  }

  VersionStore& store() { return *store_; }
  // A streamed answer is assembled in windows of whole entries of about
  // this many bytes: enough batches to keep every fetch in flight busy,
  // without holding the whole answer (64 MiB by default).
  int64_t stream_window_bytes() const {
    return 2 * options_.fetch_batch_bytes *
           std::max(options_.fetches_in_flight, 1);
  }

 private:
  ModelRegistry* const registry_;
  SessionManager* const sessions_;
  VersionStore* const store_;
  VersionNodes* const nodes_;
  const Options options_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_WEIGHT_SYNC_H_
