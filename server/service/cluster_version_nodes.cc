#include "server/service/cluster_version_nodes.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/version_chunk_wire.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {

absl::StatusOr<int64_t> ClusterVersionNodes::PublishEverywhere(
    const std::string& model, int64_t version, bool copy_ahead) {
  v1::NodePublishVersionRequest request;
  request.set_model(model);
  request.set_version(version);
  request.set_copy_ahead(copy_ahead);
  request.set_epoch(membership_->epoch());
  auto ask = [this](int node, const v1::NodePublishVersionRequest& request)
      -> absl::StatusOr<int64_t> {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    v1::NodePublishVersionResponse response;
    const absl::Status status =
        FromGrpcStatus(v1::Peer::NewStub(membership_->ChannelTo(node))
                           ->NodePublishVersion(&context, request, &response));
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("node ", node, ": ", status.message()));
    }
    return response.bytes();
  };
  std::map<int, std::future<absl::StatusOr<int64_t>>> remote;
  for (int node = 0; node < membership_->size(); ++node) {
    if (node == membership_->node_rank()) continue;
    remote[node] = std::async(std::launch::async, ask, node, request);
  }
  std::map<int, absl::StatusOr<int64_t>> taken;
  taken.emplace(membership_->node_rank(),
                local_->Take(model, version, copy_ahead));
  for (auto& [node, future] : remote) taken.emplace(node, future.get());
  int64_t total = 0;
  const absl::Status* failed = nullptr;
  for (const auto& [node, bytes] : taken) {
    if (bytes.ok()) {
      total += *bytes;
    } else if (failed == nullptr) {
      failed = &bytes.status();
    }
  }
  if (failed == nullptr) return total;
  // All or nothing: the nodes that took the version drop it again, so no
  // reader ever finds a version some node lacks.
  const std::string why =
      absl::StrCat("its publish failed (", failed->message(), ")");
  v1::NodePublishVersionRequest undo = request;
  undo.set_roll_back(true);
  undo.set_reason(why);
  std::vector<std::string> undone;
  std::vector<std::string> stuck;
  for (const auto& [node, bytes] : taken) {
    // A node that timed out may have taken it all the same.
    if (!bytes.ok() && !absl::IsDeadlineExceeded(bytes.status())) continue;
    if (node == membership_->node_rank()) {
      local_->RollBack(model, version, why);
      undone.push_back(absl::StrCat(node));
    } else if (absl::StatusOr<int64_t> rolled = ask(node, undo); rolled.ok()) {
      undone.push_back(absl::StrCat(node));
    } else {
      stuck.push_back(std::string(rolled.status().message()));
    }
  }
  return absl::Status(
      failed->code(),
      absl::StrCat("publish of version ", version, " of model '", model,
                   "' failed: ", failed->message(), "; rolled back on nodes [",
                   absl::StrJoin(undone, ", "), "]",
                   stuck.empty() ? ""
                                 : absl::StrCat("; not rolled back: ",
                                                absl::StrJoin(stuck, "; "))));
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
  const std::shared_ptr<grpc::Channel> channel = membership_->ChannelTo(node);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader =
      wire::StartRawNodeReadVersion(channel.get(), &context, request);
  // The answer is the pieces' bytes concatenated: each chunk is cut along
  // the pieces and copied from gRPC's slices to their places in `out` as it
  // arrives.
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
  grpc::ByteBuffer message;
  wire::VersionChunkView chunk;
  int64_t at = 0;
  size_t piece = 0;
  int64_t in_piece = 0;  // Bytes of pieces[piece] already placed.
  while (reader->Read(&message)) {
    absl::Status bad = wire::DecodeVersionChunk(message, &chunk);
    if (bad.ok() && chunk.data_bytes > expected - at) {
      bad = absl::InternalError(absl::StrCat(
          "node ", node, " sent more than the ", expected, " bytes asked"));
    }
    if (!bad.ok()) {
      context.TryCancel();
      reader->Finish().ok();
      return bad;
    }
    for (absl::string_view data : chunk.data) {
      int64_t used = 0;
      while (used < static_cast<int64_t>(data.size())) {
        const int64_t piece_bytes = pieces[piece].numel * element;
        const int64_t n = std::min<int64_t>(
            piece_bytes - in_piece, static_cast<int64_t>(data.size()) - used);
        std::memcpy(out + pieces[piece].dest_element * element + in_piece,
                    data.data() + used, n);
        used += n;
        in_piece += n;
        if (in_piece == piece_bytes) {
          ++piece;
          in_piece = 0;
        }
      }
    }
    at += chunk.data_bytes;
  }
  if (absl::Status status = FromGrpcStatus(reader->Finish()); !status.ok()) {
    return status;
  }
  if (at != expected) {
    return absl::InternalError(
        absl::StrCat("node ", node, " sent ", at, " bytes of ", expected));
  }
  return absl::OkStatus();
}

}  // namespace summon::server
