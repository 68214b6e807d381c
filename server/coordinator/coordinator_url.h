#ifndef SUMMON_SERVER_COORDINATOR_COORDINATOR_URL_H_
#define SUMMON_SERVER_COORDINATOR_COORDINATOR_URL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::server {

// summond's --coordinator: etcd://HOST:PORT[,HOST:PORT...]/CLUSTER.
struct CoordinatorUrl {
  std::vector<std::string> endpoints;  // HOST:PORT of etcd members.
  std::string cluster;                 // Keys live under /summon/CLUSTER/.
};

// INVALID_ARGUMENT saying what is wrong: another scheme, no or a malformed
// endpoint (a port outside 1..65535), a repeated endpoint, a missing
// cluster name or one outside [A-Za-z0-9._-]{1,63}.
absl::StatusOr<CoordinatorUrl> ParseCoordinatorUrl(absl::string_view url);

// What summond runs its cluster on (--coordinator).
struct CoordinatorChoice {
  // "" (the default) or "static": a single node, or the fixed --nodes list
  // with node 0 leading (StaticCoordinator).
  bool etcd = false;
  CoordinatorUrl url;  // When etcd.
};
// INVALID_ARGUMENT as ParseCoordinatorUrl for a malformed etcd URL, or for
// anything else that is neither "" nor "static".
absl::StatusOr<CoordinatorChoice> ParseCoordinatorFlag(absl::string_view flag);
}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_COORDINATOR_URL_H_
