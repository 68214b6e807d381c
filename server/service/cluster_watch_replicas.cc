#include "server/service/cluster_watch_replicas.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {
namespace {

// The node's name on every error, as the partials' calls do.
absl::Status Named(int node, const grpc::Status& status) {
  const absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(converted.code(),
                      absl::StrCat("node ", node, ": ", converted.message()));
}

}  // namespace

void WatchVersionToProto(const WatchVersion& version, v1::WatchVersion* out) {
  out->set_model(version.model);
  out->set_created_at_unix_ms(absl::ToUnixMillis(version.created_at));
  out->set_removed(version.removed);
  out->set_last_step(version.last_step);
}

WatchVersion WatchVersionFromProto(const v1::WatchVersion& version) {
  return WatchVersion{version.model(),
                      absl::FromUnixMillis(version.created_at_unix_ms()),
                      version.removed(), version.last_step()};
}

void WatchChunkToProto(const WatchChunk& chunk, v1::WatchChunk* out) {
  using Kind = WatchChunk::Kind;
  switch (chunk.kind) {
    case Kind::kReplace:
      out->set_kind(v1::WATCH_CHUNK_KIND_REPLACE);
      break;
    case Kind::kAppend:
      out->set_kind(v1::WATCH_CHUNK_KIND_APPEND);
      break;
    case Kind::kCommit:
      out->set_kind(v1::WATCH_CHUNK_KIND_COMMIT);
      break;
    case Kind::kRecord:
      out->set_kind(v1::WATCH_CHUNK_KIND_RECORD);
      break;
    case Kind::kRemove:
      out->set_kind(v1::WATCH_CHUNK_KIND_REMOVE);
      break;
  }
  out->set_model(chunk.model);
  out->set_created_at_unix_ms(absl::ToUnixMillis(chunk.created_at));
  out->set_previous_step(chunk.previous_step);
  out->set_json(chunk.json);
}

absl::StatusOr<WatchChunk> WatchChunkFromProto(const v1::WatchChunk& chunk) {
  using Kind = WatchChunk::Kind;
  WatchChunk out;
  switch (chunk.kind()) {
    case v1::WATCH_CHUNK_KIND_REPLACE:
      out.kind = Kind::kReplace;
      break;
    case v1::WATCH_CHUNK_KIND_APPEND:
      out.kind = Kind::kAppend;
      break;
    case v1::WATCH_CHUNK_KIND_COMMIT:
      out.kind = Kind::kCommit;
      break;
    case v1::WATCH_CHUNK_KIND_RECORD:
      out.kind = Kind::kRecord;
      break;
    case v1::WATCH_CHUNK_KIND_REMOVE:
      out.kind = Kind::kRemove;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown watch chunk kind ", chunk.kind()));
  }
  out.model = chunk.model();
  out.created_at = absl::FromUnixMillis(chunk.created_at_unix_ms());
  out.previous_step = chunk.previous_step();
  out.json = chunk.json();
  return out;
}

std::vector<int> ClusterWatchReplicas::Followers() const {
  std::vector<int> nodes;
  for (int node = 0; node < membership_->size(); ++node) {
    if (node != membership_->node_rank()) nodes.push_back(node);
  }
  return nodes;
}

absl::StatusOr<std::vector<WatchVersion>> ClusterWatchReplicas::Versions(
    int node) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::NodeWatchVersionsRequest request;
  request.set_epoch(membership_->epoch());
  v1::NodeWatchVersionsResponse response;
  if (absl::Status status =
          Named(node, v1::Peer::NewStub(membership_->ChannelTo(node))
                          ->NodeWatchVersions(&context, request, &response));
      !status.ok()) {
    return status;
  }
  std::vector<WatchVersion> versions;
  for (const v1::WatchVersion& version : response.watches()) {
    versions.push_back(WatchVersionFromProto(version));
  }
  return versions;
}

absl::StatusOr<std::vector<WatchChunk>> ClusterWatchReplicas::Fetch(
    int node, const std::string& model) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::NodeWatchFetchRequest request;
  request.set_model(model);
  request.set_epoch(membership_->epoch());
  std::unique_ptr<grpc::ClientReader<v1::WatchChunk>> reader =
      v1::Peer::NewStub(membership_->ChannelTo(node))
          ->NodeWatchFetch(&context, request);
  std::vector<WatchChunk> chunks;
  v1::WatchChunk chunk;
  absl::Status converted;
  while (reader->Read(&chunk)) {
    absl::StatusOr<WatchChunk> read = WatchChunkFromProto(chunk);
    if (!read.ok()) {
      converted = read.status();
      context.TryCancel();
      break;
    }
    chunks.push_back(*std::move(read));
  }
  const absl::Status finished = Named(node, reader->Finish());
  if (!converted.ok()) return converted;
  if (!finished.ok()) return finished;
  return chunks;
}

absl::Status ClusterWatchReplicas::Apply(int node, const WatchChunk& chunk) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::NodeWatchApplyRequest request;
  request.set_epoch(membership_->epoch());
  WatchChunkToProto(chunk, request.mutable_chunk());
  v1::NodeWatchApplyResponse response;
  return Named(node, v1::Peer::NewStub(membership_->ChannelTo(node))
                         ->NodeWatchApply(&context, request, &response));
}

}  // namespace summon::server
