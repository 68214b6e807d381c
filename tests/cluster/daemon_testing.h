#ifndef SUMMON_TESTS_CLUSTER_DAEMON_TESTING_H_
#define SUMMON_TESTS_CLUSTER_DAEMON_TESTING_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"

namespace summon::tests {

// Pieces shared by the fixtures that run summond as real processes
// (tests/cluster's LocalCluster, tests/faults' FaultCluster).

// A file of the test's runfiles, e.g. "server/summond".
std::string RunfilePath(absl::string_view path);

// `count` distinct ports that were free on 127.0.0.1 a moment ago: all are
// bound (port 0) at once, so the kernel hands out different ones, then
// released for the daemons to take.
absl::StatusOr<std::vector<int>> PickFreePorts(int count);

// grpc.health.v1 of the server behind `channel` ("" service), 2 s deadline.
absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus>
CheckHealth(const std::shared_ptr<grpc::Channel>& channel);

// Until every address reports SERVING; `check_alive` runs between polls so a
// daemon that died ends the wait at once. UNAVAILABLE naming the node after
// `timeout`.
absl::Status WaitServing(
    const std::vector<std::string>& addresses, absl::Duration timeout,
    const std::function<std::shared_ptr<grpc::Channel>(const std::string&)>&
        channel_to,
    const std::function<absl::Status()>& check_alive);

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_DAEMON_TESTING_H_
