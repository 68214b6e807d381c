#ifndef SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_
#define SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_

// What SummonClient's files (summon_client_*.cc, one per concern) share:
// one unary call on a generated stub, the same way for every RPC.

#include <memory>

#include "absl/status/statusor.h"
#include "client/lib/summon_client.h"
#include "grpcpp/client_context.h"

namespace summon::client {

// One unary call on a generated stub.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Unary(
    Stub& stub,
    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                 Response*),
    absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context,
    const Request& request) {
  if (!context.ok()) return context.status();
  Response response;
  const grpc::Status status =
      (stub.*method)(context->get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_
