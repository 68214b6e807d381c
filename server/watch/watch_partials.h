#ifndef SUMMON_SERVER_WATCH_WATCH_PARTIALS_H_
#define SUMMON_SERVER_WATCH_WATCH_PARTIALS_H_

// One node's share of a watch record: partial statistics over the slices
// of the watched parameters that this node's ranks hold, each element
// counted on exactly one rank of the cluster (the replicas of NO_SHARD and
// the hybrid strategies hold copies: the single-copy gather plan picks one
// source per element, and that source's node counts it).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/watch_stats.h"
#include "server/model/model_entry.h"
#include "server/model/model_registry.h"

namespace summon::server {

struct WatchPartialsRequest {
  std::string model;
  std::vector<std::string> params;  // Primary FQNs.
  bool grad = false;
  int bins = 0;
  // Per parameter; nullopt: no histogram (the first pass finds the range).
  std::vector<std::optional<core::HistogramRange>> ranges;
};

// Reads this node's shard bytes of the parameters once: host shards in
// place, device shards where they are (ShardStore::AccumulateWatchShard:
// CUDA kernels on a GPU). FAILED_PRECONDITION for grads a local rank does
// not have; NOT_FOUND for an unknown FQN.
absl::StatusOr<std::vector<core::WatchPartial>> ComputeNodeWatchPartials(
    ModelEntry& model, const WatchPartialsRequest& request);

// What the leader asks of every node (one implementation per deployment:
// this node alone, or the cluster over the Peer service).
class WatchNodes {
 public:
  virtual ~WatchNodes() = default;
  // Every node's partials, one list per node.
  virtual absl::StatusOr<std::vector<std::vector<core::WatchPartial>>>
  Partials(const WatchPartialsRequest& request) = 0;
};

// This node alone: the single-node deployment (and a cluster's own node).
class LocalWatchNodes : public WatchNodes {
 public:
  explicit LocalWatchNodes(ModelRegistry* registry) : registry_(registry) {}
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> Partials(
      const WatchPartialsRequest& request) override;

 private:
  ModelRegistry* const registry_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WATCH_WATCH_PARTIALS_H_
