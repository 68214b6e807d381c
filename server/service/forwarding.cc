#include "server/service/forwarding.h"

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/read_chunk_wire.h"

namespace summon::server {
namespace {

// Model operations (create, load, delete) touch every node's shards.
constexpr absl::Duration kModelOperationTimeout = absl::Minutes(10);

}  // namespace

grpc::Status LeaderForwarder::FromLeader(grpc::Status status) const {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
      status.error_message().find("node ") != std::string::npos) {
    return status;
  }
  // The leader this node forwarded to: node 0 only in the static mode.
  return grpc::Status(
      status.error_code(),
      absl::StrCat("node ", membership_->leader(),
                   " (the leader) is unreachable: ", status.error_message()));
}

std::unique_ptr<grpc::ClientContext> LeaderForwarder::ContextFor(
    const grpc::ServerContext& incoming) const {
  auto context = std::make_unique<grpc::ClientContext>();
  // Never the raw summon-principal header: on a TLS port a client could
  // set it to anyone, and the leader believes what a peer forwards.
  absl::StatusOr<auth::Caller> caller = authorizer_->Identify(incoming);
  if (caller.ok()) {
    context->AddMetadata(auth::kPrincipalHeader, caller->principal);
    context->AddMetadata(
        auth::kForwardedRolesHeader,
        caller->roles.ToString() == "none" ? "" : caller->roles.ToString());
    context->AddMetadata(auth::kForwardedModelsHeader,
                         absl::StrJoin(caller->models, ","));
  }
  context->set_deadline(incoming.deadline());
  return context;
}

grpc::Status LeaderForwarder::ReadTensor(grpc::ServerContext* context,
                                         const v1::ReadTensorRequest& request,
                                         ReadTensorStream* stream) const {
  std::unique_ptr<grpc::ClientContext> upstream = ContextFor(*context);
  const std::shared_ptr<grpc::Channel> leader =
      membership_->ChannelTo(membership_->leader());
  auto reader = wire::StartRawReadTensor(leader.get(), upstream.get(), request);
  grpc::ByteBuffer chunk;
  while (reader->Read(&chunk)) {
    if (context->IsCancelled() || !stream->Write(chunk)) {
      upstream->TryCancel();
      break;
    }
  }
  return FromLeader(reader->Finish());
}

grpc::Status LeaderForwarder::WriteTensor(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::WriteTensorRequest>* reader,
    v1::WriteTensorResponse* response) const {
  std::unique_ptr<grpc::ClientContext> upstream = ContextFor(*context);
  auto stub = Summon();
  auto writer = stub->WriteTensor(upstream.get(), response);
  v1::WriteTensorRequest message;
  while (reader->Read(&message)) {
    if (!writer->Write(message)) break;
  }
  if (context->IsCancelled()) {
    // The client went away mid-stream: the leader must not apply a partial
    // write, so the upstream call is cancelled rather than half-closed.
    upstream->TryCancel();
  } else {
    writer->WritesDone();
  }
  return FromLeader(writer->Finish());
}

std::vector<absl::Status> OnFollowers(
    Membership& membership,
    const std::function<grpc::Status(v1::Peer::Stub&, grpc::ClientContext&)>&
        call) {
  return OnFollowers(
      membership, [&](int, v1::Peer::Stub& stub, grpc::ClientContext& context) {
        return call(stub, context);
      });
}

std::vector<absl::Status> OnFollowers(
    Membership& membership,
    const std::function<grpc::Status(int node, v1::Peer::Stub&,
                                     grpc::ClientContext&)>& call) {
  std::vector<absl::Status> results(membership.size());
  std::vector<std::thread> threads;
  // A node outside the epoch (the cluster formed on its survivors) is not
  // called: a model operation must reach every node of the list, so it is
  // refused naming the node (callers that fold answers skip it).
  const std::set<int> absent = membership.AbsentNodes();
  for (int node = 0; node < membership.size(); ++node) {
    if (node == membership.node_rank()) continue;  // The leader: any node.
    if (absent.count(node) > 0) {
      results[node] = absl::UnavailableError(
          absl::StrCat("node ", node,
                       " is not in the cluster (lost, not back yet); model "
                       "operations wait until it is back"));
      continue;
    }
    threads.emplace_back([&, node] {
      auto stub = v1::Peer::NewStub(membership.ChannelTo(node));
      grpc::ClientContext context;
      context.set_deadline(
          absl::ToChronoTime(absl::Now() + kModelOperationTimeout));
      const absl::Status status = FromGrpcStatus(call(node, *stub, context));
      if (!status.ok()) {
        results[node] = absl::Status(
            status.code(), absl::StrCat("node ", node, ": ", status.message()));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace summon::server
