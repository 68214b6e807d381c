#ifndef SUMMON_SERVER_SERVICE_FORWARDING_H_
#define SUMMON_SERVER_SERVICE_FORWARDING_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "server/auth/authorizer.h"
#include "server/cluster/membership.h"
#include "server/rpc/status_conversion.h"
#include "summon/v1/peer.grpc.pb.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server {

// Summon.ReadTensor as the server streams it: the request, then replies as
// raw byte buffers (proto/read_chunk_wire.h).
using ReadTensorStream =
    grpc::ServerSplitStreamer<v1::ReadTensorRequest, grpc::ByteBuffer>;

// A follower hands client calls to the leader, which decides for the whole
// cluster: the same request, the caller's principal and deadline.
class LeaderForwarder {
 public:
  LeaderForwarder(Membership* membership, const auth::Authorizer* authorizer)
      : membership_(membership), authorizer_(authorizer) {}

  // A client context for the leader carrying `incoming`'s caller as this
  // node authenticated it (principal, roles, models: the leader believes
  // them from a peer) and its deadline.
  std::unique_ptr<grpc::ClientContext> ContextFor(
      const grpc::ServerContext& incoming) const;
  std::unique_ptr<v1::Summon::Stub> Summon() const {
    return v1::Summon::NewStub(membership_->ChannelTo(membership_->leader()));
  }
  std::unique_ptr<v1::Trainer::Stub> Trainer() const {
    return v1::Trainer::NewStub(membership_->ChannelTo(membership_->leader()));
  }

  template <typename Stub, typename Request, typename Response>
  grpc::Status Unary(const grpc::ServerContext& incoming, Stub& stub,
                     grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                  const Request&, Response*),
                     const Request& request, Response* response) const {
    std::unique_ptr<grpc::ClientContext> context = ContextFor(incoming);
    return FromLeader((stub.*method)(context.get(), request, response));
  }

  // Where a unary call is decided: nullopt when this node decides it (a
  // single node, or the leader); otherwise the leader's answer, or why the
  // cluster cannot answer yet.
  template <typename Stub, typename Request, typename Response>
  std::optional<grpc::Status> Route(
      const grpc::ServerContext& incoming,
      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                   Response*),
      const Request& request, Response* response) const {
    if (membership_ == nullptr) return std::nullopt;
    if (absl::Status ready = membership_->CheckReady(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    if (membership_->is_leader()) return std::nullopt;
    Stub stub(membership_->ChannelTo(membership_->leader()));
    return Unary(incoming, stub, method, request, response);
  }

  // As Route, for the calls that keep an open session going (its
  // description, its lease renewal): also decided by a leader held without
  // a coordinator quorum (Membership::CheckServingReads), which refuses
  // every other call.
  template <typename Stub, typename Request, typename Response>
  std::optional<grpc::Status> RouteOpenSession(
      const grpc::ServerContext& incoming,
      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                   Response*),
      const Request& request, Response* response) const {
    if (membership_ == nullptr) return std::nullopt;
    if (absl::Status ready = membership_->CheckServingReads(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    if (membership_->formed_as_leader()) return std::nullopt;
    Stub stub(membership_->ChannelTo(membership_->leader()));
    return Unary(incoming, stub, method, request, response);
  }

  // Where a read-only listing is answered: as Route while the cluster
  // serves and the leader answers; otherwise (a node down: not READY, or
  // the leader unreachable) nullopt, and this node answers from its own
  // records.
  template <typename Stub, typename Request, typename Response>
  std::optional<grpc::Status> RouteListing(
      const grpc::ServerContext& incoming,
      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                   Response*),
      const Request& request, Response* response) const {
    if (membership_ == nullptr) return std::nullopt;
    if (membership_->CheckReady().ok()) {
      if (membership_->is_leader()) return std::nullopt;
      Stub stub(membership_->ChannelTo(membership_->leader()));
      const grpc::Status status =
          Unary(incoming, stub, method, request, response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
      response->Clear();
    }
    return std::nullopt;
  }

  // A transport failure reaching the leader says so (the bare gRPC message
  // would not name the node).
  grpc::Status FromLeader(grpc::Status status) const;

  // Passes the leader's replies on as they arrive, without parsing them.
  grpc::Status ReadTensor(grpc::ServerContext* context,
                          const v1::ReadTensorRequest& request,
                          ReadTensorStream* stream) const;
  grpc::Status WriteTensor(grpc::ServerContext* context,
                           grpc::ServerReader<v1::WriteTensorRequest>* reader,
                           v1::WriteTensorResponse* response) const;

 private:
  Membership* const membership_;
  const auth::Authorizer* const authorizer_;
};

// The leader applies a model operation on every follower after itself;
// results by follower (index = node rank; the leader's entry stays OK).
std::vector<absl::Status> OnFollowers(
    Membership& membership,
    const std::function<grpc::Status(v1::Peer::Stub&, grpc::ClientContext&)>&
        call);
// The same, telling `call` which follower it reaches (its answers can then
// go to that follower's slot).
std::vector<absl::Status> OnFollowers(
    Membership& membership,
    const std::function<grpc::Status(int node, v1::Peer::Stub&,
                                     grpc::ClientContext&)>& call);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_FORWARDING_H_
