#ifndef SUMMON_SERVER_SERVICE_CLUSTER_WATCH_REPLICAS_H_
#define SUMMON_SERVER_SERVICE_CLUSTER_WATCH_REPLICAS_H_

// The leader's WatchReplicas in a cluster: every follower's watch store over
// Peer.NodeWatchVersions / NodeWatchFetch / NodeWatchApply. Also the
// conversions the Peer handlers share.

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/cluster/membership.h"
#include "server/watch/watch_replication.h"
#include "summon/v1/peer.pb.h"

namespace summon::server {

void WatchVersionToProto(const WatchVersion& version, v1::WatchVersion* out);
WatchVersion WatchVersionFromProto(const v1::WatchVersion& version);
void WatchChunkToProto(const WatchChunk& chunk, v1::WatchChunk* out);
// INVALID_ARGUMENT for a kind this daemon does not know.
absl::StatusOr<WatchChunk> WatchChunkFromProto(const v1::WatchChunk& chunk);

class ClusterWatchReplicas : public WatchReplicas {
 public:
  ClusterWatchReplicas(Membership* membership, absl::Duration timeout)
      : membership_(membership), timeout_(timeout) {}
  std::vector<int> Followers() const override;
  absl::StatusOr<std::vector<WatchVersion>> Versions(int node) override;
  absl::StatusOr<std::vector<WatchChunk>> Fetch(
      int node, const std::string& model) override;
  absl::Status Apply(int node, const WatchChunk& chunk) override;

 private:
  Membership* const membership_;
  const absl::Duration timeout_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_CLUSTER_WATCH_REPLICAS_H_
