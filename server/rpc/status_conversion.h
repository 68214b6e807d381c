#ifndef SUMMON_SERVER_RPC_STATUS_CONVERSION_H_
#define SUMMON_SERVER_RPC_STATUS_CONVERSION_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace summon::server {

// The one place where absl::Status (used everywhere inside summon) and
// grpc::Status (the wire) meet. Both use the canonical code numbers 0..16, so
// codes map by number; the message is carried unchanged. absl payloads have
// no gRPC counterpart here and are dropped.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace summon::server

#endif  // SUMMON_SERVER_RPC_STATUS_CONVERSION_H_
