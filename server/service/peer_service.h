#ifndef SUMMON_SERVER_SERVICE_PEER_SERVICE_H_
#define SUMMON_SERVER_SERVICE_PEER_SERVICE_H_

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "server/auth/authorizer.h"
#include "server/checkpoint/checkpoint_roots.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/membership.h"
#include "server/model/model_registry.h"
#include "server/runtime/node_runtime.h"
#include "server/watch/watch_store.h"
#include "server/weight_sync/version_store.h"

namespace summon::server {

// summon.v1.Peer on every node: membership (the leader's side), the
// rendezvous store (KvStoreService) and the node operations the leader fans
// out, each run on this node's runtime and registry.
class PeerServiceImpl final : public KvStoreService {
 public:
  PeerServiceImpl(LocalKvStore& store, Membership* membership,
                  ModelRegistry* registry, NodeRuntime* runtime,
                  const auth::Authorizer* authorizer);

  // The rendezvous store's calls, for peers only.
  grpc::Status StoreSet(grpc::ServerContext* context,
                        const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context,
                        const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override;
  grpc::Status StoreWait(grpc::ServerContext* context,
                         const v1::StoreWaitRequest* request,
                         v1::StoreWaitResponse* response) override;

  grpc::Status Join(grpc::ServerContext* context,
                    const v1::JoinRequest* request,
                    v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status NodeGather(grpc::ServerContext* context,
                          const v1::NodeGatherRequest* request,
                          v1::NodeGatherResponse* response) override;
  grpc::Status NodeWrite(grpc::ServerContext* context,
                         const v1::NodeWriteRequest* request,
                         v1::NodeWriteResponse* response) override;
  grpc::Status NodeRead(
      grpc::ServerContext* context, const v1::NodeReadRequest* request,
      grpc::ServerWriter<v1::NodeReadResponse>* writer) override;
  grpc::Status NodeStats(grpc::ServerContext* context,
                         const v1::NodeStatsRequest* request,
                         v1::NodeStatsResponse* response) override;
  grpc::Status NodeWatchPartials(
      grpc::ServerContext* context, const v1::NodeWatchPartialsRequest* request,
      v1::NodeWatchPartialsResponse* response) override;
  // This node's copy of the leader's watches (a follower's replica; the
  // leader's own store answers when a restarted leader asks nothing).
  grpc::Status NodeWatchVersions(
      grpc::ServerContext* context, const v1::NodeWatchVersionsRequest* request,
      v1::NodeWatchVersionsResponse* response) override;
  grpc::Status NodeWatchFetch(
      grpc::ServerContext* context, const v1::NodeWatchFetchRequest* request,
      grpc::ServerWriter<v1::WatchChunk>* writer) override;
  grpc::Status NodeWatchApply(grpc::ServerContext* context,
                              const v1::NodeWatchApplyRequest* request,
                              v1::NodeWatchApplyResponse* response) override;
  // The node's watch store; null: the NodeWatch{Versions,Fetch,Apply} calls
  // answer FAILED_PRECONDITION.
  void SetWatches(WatchStore* watches) { watches_ = watches; }
  // Weight sync (peer_service_weight_sync.cc): this node's snapshot of a
  // version, and pieces of it for readers on other nodes. Null: they
  // answer FAILED_PRECONDITION.
  void SetVersions(VersionStore* versions) { versions_ = versions; }
  grpc::Status NodePublishVersion(
      grpc::ServerContext* context,
      const v1::NodePublishVersionRequest* request,
      v1::NodePublishVersionResponse* response) override;
  // Peer.NodeReadVersion, whose replies are raw byte buffers
  // (proto/version_chunk_wire): the constructor routes the method here.
  using NodeReadVersionStream =
      grpc::ServerSplitStreamer<v1::NodeReadVersionRequest, grpc::ByteBuffer>;
  grpc::Status StreamNodeReadVersion(grpc::ServerContext* context,
                                     NodeReadVersionStream* stream);
  // This node's checkpoint roots (R20): the path of a cluster's load or
  // save, the leader's, must lie beneath them here too.
  void SetCheckpointRoots(const std::vector<std::string>& roots) {
    checkpoint_roots_ = CheckpointRoots(roots);
  }
  grpc::Status NodePrepare(grpc::ServerContext* context,
                           const v1::NodePrepareRequest* request,
                           v1::NodePrepareResponse* response) override;
  grpc::Status NodeCommit(grpc::ServerContext* context,
                          const v1::NodeCommitRequest* request,
                          v1::NodeCommitResponse* response) override;
  grpc::Status NodeSetGenerations(
      grpc::ServerContext* context,
      const v1::NodeSetGenerationsRequest* request,
      v1::NodeSetGenerationsResponse* response) override;
  grpc::Status NodeAbort(grpc::ServerContext* context,
                         const v1::NodeAbortRequest* request,
                         v1::NodeAbortResponse* response) override;
  grpc::Status NodeRelease(grpc::ServerContext* context,
                           const v1::NodeReleaseRequest* request,
                           v1::NodeReleaseResponse* response) override;
  grpc::Status NodeCreateModel(grpc::ServerContext* context,
                               const v1::NodeCreateModelRequest* request,
                               v1::NodeModelResponse* response) override;
  grpc::Status NodeLoadModel(grpc::ServerContext* context,
                             const v1::NodeLoadModelRequest* request,
                             v1::NodeModelResponse* response) override;
  grpc::Status NodeChecksum(grpc::ServerContext* context,
                            const v1::NodeChecksumRequest* request,
                            v1::ModelChecksumResponse* response) override;
  grpc::Status NodeDeleteModel(grpc::ServerContext* context,
                               const v1::NodeDeleteModelRequest* request,
                               v1::NodeModelResponse* response) override;
  grpc::Status NodeSaveModel(grpc::ServerContext* context,
                             const v1::NodeSaveModelRequest* request,
                             v1::NodeModelResponse* response) override;
  grpc::Status NodeHealth(grpc::ServerContext* context,
                          const v1::NodeHealthRequest* request,
                          v1::NodeHealthResponse* response) override;

 private:
  // OK for a peer (the Peer rows of server/auth/roles.cc), else the refusal.
  grpc::Status Allow(const grpc::ServerContext& context, const char* method,
                     const google::protobuf::Message& request) const {
    return auth::CheckCall(*authorizer_, context, method, request);
  }
  // FAILED_PRECONDITION unless `epoch` is this node's current epoch: every
  // Node* handler but NodeHealth calls it first (peer.proto, "Fencing").
  grpc::Status Fence(uint64_t epoch) const;
  // Allow, Fence, then weight sync served on this node: the preamble of
  // both weight-sync handlers (peer_service_weight_sync.cc).
  grpc::Status AdmitVersionCall(const grpc::ServerContext& context,
                                const char* method,
                                const google::protobuf::Message& request,
                                uint64_t epoch) const;

  const auth::Authorizer* const authorizer_;
  Membership* const membership_;
  ModelRegistry* const registry_;
  NodeRuntime* const runtime_;
  WatchStore* watches_ = nullptr;
  VersionStore* versions_ = nullptr;
  CheckpointRoots checkpoint_roots_{{}};
};

// Creates a model on this node from a CreateModelRequest (each node fills
// only its own ranks' shards). Shared by the Summon service (single node,
// leader) and the Peer service (followers).
absl::StatusOr<std::shared_ptr<ModelEntry>> CreateModelFromRequest(
    ModelRegistry& registry, const v1::CreateModelRequest& request);
// Appends this node's per-rank checksums of `model` to `response`.
absl::Status AppendChecksums(ModelRegistry& registry, ModelEntry& model,
                             v1::ModelChecksumResponse* response);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_PEER_SERVICE_H_
