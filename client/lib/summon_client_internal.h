#ifndef SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_
#define SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_

// What SummonClient's files (summon_client_*.cc, one per concern) share:
// one unary call on a generated stub, the same way for every RPC.

#include <algorithm>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
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

// While a cluster on etcd elects its leader, every node answers UNAVAILABLE
// with this in the message (docs/operations.md, "Running a cluster").
inline bool ElectingLeader(const absl::Status& status) {
  return absl::IsUnavailable(status) &&
         absl::StrContains(status.message(), "electing a leader");
}

template <typename Request, typename Response>
absl::StatusOr<Response> SummonClient::UnaryThroughElection(
    grpc::Status (v1::Summon::Stub::*method)(grpc::ClientContext*,
                                              const Request&, Response*),
    const Request& request) const {
  constexpr absl::Duration kLongestWait = absl::Minutes(1);
  constexpr absl::Duration kPause = absl::Milliseconds(100);
  const absl::Time give_up =
      absl::Now() + std::min(options_.timeout, kLongestWait);
  while (true) {
    absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context =
        NewContext();
    // One deadline over every attempt: the caller's.
    if (context.ok()) (*context)->set_deadline(absl::ToChronoTime(give_up));
    absl::StatusOr<Response> response =
        Unary(*summon_, method, std::move(context), request);
    if (response.ok() || !ElectingLeader(response.status()) ||
        absl::Now() + kPause >= give_up) {
      return response;
    }
    absl::SleepFor(kPause);
  }
}

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_SUMMON_CLIENT_INTERNAL_H_
