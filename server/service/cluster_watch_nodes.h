#ifndef SUMMON_SERVER_SERVICE_CLUSTER_WATCH_NODES_H_
#define SUMMON_SERVER_SERVICE_CLUSTER_WATCH_NODES_H_

// The leader's WatchNodes in a cluster: its own node's partials computed in
// place, every other node's asked for over Peer.NodeWatchPartials (in
// parallel). Also the two conversions the Peer handler shares.

#include <vector>

#include "absl/time/time.h"
#include "server/cluster/membership.h"
#include "server/watch/watch_partials.h"
#include "summon/v1/peer.pb.h"

namespace summon::server {

v1::NodeWatchPartialsRequest WatchPartialsRequestToProto(
    const WatchPartialsRequest& request);
WatchPartialsRequest WatchPartialsRequestFromProto(
    const v1::NodeWatchPartialsRequest& request);
// What a node checks before reading its shards for a peer's request:
// INVALID_ARGUMENT for bins outside TensorStats' [0, 4096], more ranges
// than parameters, or a range that is not finite with lower <= upper (the
// binning would index outside the histogram).
absl::Status CheckWatchPartialsRequest(const WatchPartialsRequest& request);
void WatchPartialToProto(const core::WatchPartial& partial,
                         v1::WatchPartial* out);
core::WatchPartial WatchPartialFromProto(const v1::WatchPartial& partial);

class ClusterWatchNodes : public WatchNodes {
 public:
  ClusterWatchNodes(Membership* membership, ModelRegistry* registry,
                    absl::Duration timeout)
      : membership_(membership), local_(registry), timeout_(timeout) {}
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> Partials(
      const WatchPartialsRequest& request) override;

 private:
  Membership* const membership_;
  LocalWatchNodes local_;
  const absl::Duration timeout_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_CLUSTER_WATCH_NODES_H_
