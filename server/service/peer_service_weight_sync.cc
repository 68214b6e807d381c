// Weight sync's Peer handlers: a node's snapshot of a version (from the
// leader's Publish) and pieces of it for a reader on another node.

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/raw_wire.h"
#include "proto/version_chunk_wire.h"
#include "server/rpc/status_conversion.h"
#include "server/runtime/fault_points.h"
#include "server/service/peer_service.h"
#include "server/service/proto_conversion.h"

namespace summon::server {
namespace {

// A reader may ask as soon as its own node has the version; the leader's
// Publish may still be reaching this one.
constexpr absl::Duration kVersionArrival = absl::Seconds(10);
constexpr int64_t kPieceChunkBytes = int64_t{1} << 20;
// Smaller pieces of a copied unit (a row of a column cut) are copied into
// the chunk: a slice of their own costs more than copying them.
constexpr int64_t kPinnedPieceMinBytes = int64_t{16} << 10;

}  // namespace

grpc::Status PeerServiceImpl::AdmitVersionCall(
    const grpc::ServerContext& context, const char* method,
    const google::protobuf::Message& request, uint64_t epoch) const {
  if (grpc::Status denied = Allow(context, method, request); !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(epoch); !fenced.ok()) return fenced;
  if (versions_ == nullptr) {
    return ToGrpcStatus(
        absl::FailedPreconditionError("weight sync is not served here"));
  }
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodePublishVersion(
    grpc::ServerContext* context, const v1::NodePublishVersionRequest* request,
    v1::NodePublishVersionResponse* response) {
  if (grpc::Status admitted =
          AdmitVersionCall(*context, "/summon.v1.Peer/NodePublishVersion",
                           *request, request->epoch());
      !admitted.ok()) {
    return admitted;
  }
  if (request->roll_back()) {
    versions_->RollBack(request->model(), request->version(),
                        request->reason());
    return grpc::Status::OK;
  }
  FaultPoint("publish.node_take");
  absl::StatusOr<int64_t> bytes = versions_->Take(
      request->model(), request->version(), request->copy_ahead());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  response->set_bytes(*bytes);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::StreamNodeReadVersion(
    grpc::ServerContext* context, NodeReadVersionStream* stream) {
  v1::NodeReadVersionRequest request;
  if (!stream->Read(&request)) {
    return ToGrpcStatus(
        absl::InvalidArgumentError("NodeReadVersion without a request"));
  }
  if (grpc::Status admitted =
          AdmitVersionCall(*context, "/summon.v1.Peer/NodeReadVersion", request,
                           request.epoch());
      !admitted.ok()) {
    return admitted;
  }
  absl::StatusOr<core::DType> dtype = DTypeFromProto(request.dtype(), "dtype");
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  // Only a version newer than every one here may still be arriving.
  absl::StatusOr<std::shared_ptr<const VersionSnapshot>> snapshot =
      versions_->Acquire(request.model(), request.version());
  if (absl::IsNotFound(snapshot.status()) &&
      versions_
          ->Wait(request.model(), request.version(),
                 absl::Now() + kVersionArrival)
          .ok()) {
    snapshot = versions_->Acquire(request.model(), request.version());
  }
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  // Sent in chunks of whole pieces, a large piece cut to fit one.
  const int64_t element = static_cast<int64_t>(core::ElementSize(*dtype));
  const int64_t chunk_numel = kPieceChunkBytes / element;
  std::vector<VersionPiece> pieces;
  for (const v1::VersionPiece& piece : request.pieces()) {
    if (piece.numel() < 0) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("a piece of ", piece.numel(), " elements")));
    }
    for (int64_t at = 0; at < piece.numel(); at += chunk_numel) {
      pieces.push_back(
          VersionPiece{piece.rank(), piece.unit(), piece.shard_element() + at,
                       std::min(chunk_numel, piece.numel() - at), 0});
    }
  }
  // A chunk's pieces go out from the version's own copies where it has
  // them in the asked dtype (the snapshot, pinned by the message, keeps
  // them unchanged until gRPC has sent it); the others are read (and
  // converted) straight into a slice gRPC sends. Either way the bytes are
  // copied at most once on this side.
  const std::shared_ptr<const void> pin = *snapshot;
  size_t first = 0;
  while (first < pieces.size()) {
    size_t last = first;
    int64_t numel = 0;
    do {
      numel += pieces[last].numel;
      ++last;
    } while (last < pieces.size() &&
             (numel + pieces[last].numel) * element <= kPieceChunkBytes);
    std::vector<grpc::Slice> data;
    std::vector<VersionPiece> to_read;  // A run of pieces without a view.
    auto read_run = [&]() -> absl::Status {
      if (to_read.empty()) return absl::OkStatus();
      int64_t run_numel = 0;
      for (const VersionPiece& piece : to_read) run_numel += piece.numel;
      wire::WritableSlice slice = wire::AllocateSlice(run_numel * element);
      absl::Status read =
          (*snapshot)->ReadPieces(to_read, *dtype,
                                  /*scatter=*/false, slice.data);
      data.push_back(std::move(slice.slice));
      to_read.clear();
      return read;
    };
    for (size_t i = first; i < last; ++i) {
      absl::StatusOr<std::optional<absl::string_view>> view =
          pieces[i].numel * element >= kPinnedPieceMinBytes
              ? (*snapshot)->CopiedBytes(pieces[i], *dtype)
              : std::optional<absl::string_view>();
      if (!view.ok()) return ToGrpcStatus(view.status());
      if (!view->has_value()) {
        to_read.push_back(pieces[i]);
        continue;
      }
      if (absl::Status read = read_run(); !read.ok()) {
        return ToGrpcStatus(read);
      }
      data.push_back(wire::SliceOf(**view, pin));
    }
    if (absl::Status read = read_run(); !read.ok()) return ToGrpcStatus(read);
    versions_->counters().peer_bytes_sent += numel * element;
    if (context->IsCancelled() ||
        !stream->Write(wire::EncodeVersionChunk(std::move(data)))) {
      return grpc::Status::CANCELLED;
    }
    first = last;
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
