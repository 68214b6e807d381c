#include "server/service/cluster_version_nodes.h"

#include <cstring>
#include <future>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {

absl::StatusOr<int64_t> ClusterVersionNodes::PublishEverywhere(
    const std::string& model, int64_t version) {
  v1::NodePublishVersionRequest request;
  request.set_model(model);
  request.set_version(version);
  request.set_epoch(membership_->epoch());
  std::vector<std::future<absl::StatusOr<int64_t>>> remote;
  for (int node = 0; node < membership_->size(); ++node) {
    if (node == membership_->node_rank()) continue;
    remote.push_back(std::async(
        std::launch::async, [this, node, &request]() -> absl::StatusOr<int64_t> {
          grpc::ClientContext context;
          context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          v1::NodePublishVersionResponse response;
          const absl::Status status = FromGrpcStatus(
              v1::Peer::NewStub(membership_->ChannelTo(node))
                  ->NodePublishVersion(&context, request, &response));
          if (!status.ok()) {
            return absl::Status(status.code(), absl::StrCat("node ", node, ": ",
                                                            status.message()));
          }
          return response.bytes();
        }));
  }
  absl::StatusOr<int64_t> total = local_->Take(model, version);
  for (auto& future : remote) {
    absl::StatusOr<int64_t> bytes = future.get();
    if (!total.ok()) continue;
    if (!bytes.ok()) {
      total = bytes.status();
      continue;
    }
    *total += *bytes;
  }
  return total;
}

absl::Status ClusterVersionNodes::ReadRemote(
    int node, const std::string& model, int64_t version, core::DType dtype,
    const std::vector<VersionPiece>& pieces, uint8_t* out) {
  v1::NodeReadVersionRequest request;
  request.set_model(model);
  request.set_version(version);
  request.set_dtype(DTypeToProto(dtype));
  request.set_epoch(membership_->epoch());
  int64_t expected = 0;
  for (const VersionPiece& piece : pieces) {
    v1::VersionPiece* wire = request.add_pieces();
    wire->set_rank(piece.rank);
    wire->set_unit(piece.unit);
    wire->set_shard_element(piece.shard_element);
    wire->set_numel(piece.numel);
    expected += piece.numel;
  }
  expected *= static_cast<int64_t>(core::ElementSize(dtype));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  std::unique_ptr<grpc::ClientReader<v1::NodeReadVersionResponse>> reader =
      v1::Peer::NewStub(membership_->ChannelTo(node))
          ->NodeReadVersion(&context, request);
  v1::NodeReadVersionResponse chunk;
  int64_t at = 0;
  while (reader->Read(&chunk)) {
    if (static_cast<int64_t>(chunk.data().size()) > expected - at) {
      context.TryCancel();
      reader->Finish().ok();
      return absl::InternalError(absl::StrCat(
          "node ", node, " sent more than the ", expected, " bytes asked"));
    }
    std::memcpy(out + at, chunk.data().data(), chunk.data().size());
    at += static_cast<int64_t>(chunk.data().size());
  }
  if (absl::Status status = FromGrpcStatus(reader->Finish()); !status.ok()) {
    return status;
  }
  if (at != expected) {
    return absl::InternalError(absl::StrCat("node ", node, " sent ", at,
                                            " bytes of ", expected));
  }
  return absl::OkStatus();
}

}  // namespace summon::server
