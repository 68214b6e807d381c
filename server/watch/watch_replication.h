#ifndef SUMMON_SERVER_WATCH_WATCH_REPLICATION_H_
#define SUMMON_SERVER_WATCH_WATCH_REPLICATION_H_

// Watches on every node of a cluster. The leader records; each change of
// its WatchStore (a watch added, removed, a step recorded) is sent to every
// follower, which keeps it in its own store and data dir. At each
// formation the leader compares every node's versions of every watch
// (WatchVersion::NewerThan), adopts the newest where a follower holds it
// (a leader restarted without its watch files gets them back) and sends
// it to every node that holds another. A follower that misses a record
// (down, a failed call) is sent the whole watch next time.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/watch/watch_store.h"

namespace summon::server {

// The leader's view of the other nodes' watch stores (one implementation
// per deployment: the cluster's over the Peer service; fakes in tests).
class WatchReplicas {
 public:
  virtual ~WatchReplicas() = default;
  // Every node but this one.
  virtual std::vector<int> Followers() const = 0;
  virtual absl::StatusOr<std::vector<WatchVersion>> Versions(int node) = 0;
  // The node's whole state of the model (WatchStore::Export).
  virtual absl::StatusOr<std::vector<WatchChunk>> Fetch(
      int node, const std::string& model) = 0;
  virtual absl::Status Apply(int node, const WatchChunk& chunk) = 0;
};

class WatchReplication {
 public:
  // Chunks of a whole watch stay below this many bytes of JSON (a gRPC
  // message carries 4 MiB by default).
  static constexpr size_t kChunkBytes = 1 << 20;

  WatchReplication(WatchStore* store, WatchReplicas* replicas)
      : store_(store), replicas_(replicas) {}

  // The model's whole state (or its tombstone) to every follower: after an
  // add or a removal. Failures are logged; the next formation repairs.
  void PushModel(const std::string& model);
  // A recorded step (WatchStore::Recorded::chunk); a follower that does
  // not hold the step before it gets the whole watch instead.
  void PushRecord(const WatchChunk& chunk);
  // At each formation, before the cluster serves: the newest version of
  // every watch on every node. Errors name the nodes that were not synced
  // (the others are).
  absl::Status Sync();

 private:
  void PushModelTo(int node, const std::string& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WatchStore* const store_;
  WatchReplicas* const replicas_;
  // One push or sync at a time, so every follower sees the leader's order.
  absl::Mutex mu_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WATCH_WATCH_REPLICATION_H_
