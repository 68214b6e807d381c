#ifndef SUMMON_SERVER_SERVICE_CLUSTER_VERSION_NODES_H_
#define SUMMON_SERVER_SERVICE_CLUSTER_VERSION_NODES_H_

// Weight sync's VersionNodes in a cluster: the leader's Publish has every
// node take its copy (its own in place, the others over
// Peer.NodePublishVersion, in parallel); a reader fetches pieces of another
// node's copy over Peer.NodeReadVersion.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/cluster/membership.h"
#include "server/weight_sync/version_nodes.h"

namespace summon::server {

class ClusterVersionNodes : public VersionNodes {
 public:
  ClusterVersionNodes(Membership* membership, VersionStore* local,
                      absl::Duration timeout)
      : membership_(membership), local_(local), timeout_(timeout) {}
  absl::StatusOr<int64_t> PublishEverywhere(const std::string& model,
                                            int64_t version,
                                            bool copy_ahead) override;
  absl::Status ReadRemote(int node, const std::string& model, int64_t version,
                          core::DType dtype,
                          const std::vector<VersionPiece>& pieces,
                          uint8_t* out) override;

 private:
  Membership* const membership_;
  VersionStore* const local_;
  const absl::Duration timeout_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_CLUSTER_VERSION_NODES_H_
