#ifndef SUMMON_SERVER_SERVICE_CLUSTER_GENERATIONS_H_
#define SUMMON_SERVER_SERVICE_CLUSTER_GENERATIONS_H_

// A new leader's unit generations, from the nodes (issue 31: "generations
// are the highest any node holds"): see SessionManager::AdoptGenerations.

#include "absl/status/status.h"
#include "server/cluster/membership.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"

namespace summon::server {

// For every model: this node's and every follower's generations (NodeChecksum
// in the current epoch), adopted by `sessions`. Called by the leader while
// the cluster forms, before it serves. A follower that does not answer is
// logged and left out (it is behind at worst, and is moved to the highest
// value with the others); an error only when a model's generations could not
// be adopted.
absl::Status RebuildLeaderGenerations(Membership& membership,
                                      ModelRegistry& registry,
                                      SessionManager& sessions);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_CLUSTER_GENERATIONS_H_
