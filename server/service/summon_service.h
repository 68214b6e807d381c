#ifndef SUMMON_SERVER_SERVICE_SUMMON_SERVICE_H_
#define SUMMON_SERVER_SERVICE_SUMMON_SERVICE_H_

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "server/auth/authorizer.h"
#include "server/checkpoint/checkpoint_roots.h"
#include "server/cluster/membership.h"
#include "server/model/model_registry.h"
#include "server/service/forwarding.h"
#include "server/service/local_fd_broker.h"
#include "server/session/session_manager.h"
#include "server/trainer/trainer_leases.h"
#include "server/watch/watch_replication.h"
#include "server/watch/watch_store.h"
#include "server/weight_sync/slice_buffer_cache.h"
#include "server/weight_sync/weight_sync.h"
#include "summon/v1/summon.grpc.pb.h"

namespace summon::server {

// summon.v1.Summon over a node's registry and session manager. Every
// handler converts its absl::Status through ToGrpcStatus, the one place
// statuses cross to gRPC.
class SummonServiceImpl final : public v1::Summon::Service {
 public:
  // `cluster` is null for a single node. In a cluster the leader decides
  // every call (applying model operations on every node) and followers
  // forward their clients' calls to it.
  SummonServiceImpl(ModelRegistry* registry, SessionManager* sessions,
                    TrainerLeases* trainers,
                    const std::vector<std::string>& checkpoint_roots,
                    const auth::Authorizer* authorizer,
                    Membership* cluster = nullptr, int max_open_streams = 0,
                    LocalFdBroker* fd_broker = nullptr);

  grpc::Status ListModels(grpc::ServerContext* context,
                          const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status DescribeModel(grpc::ServerContext* context,
                             const v1::DescribeModelRequest* request,
                             v1::Model* response) override;
  grpc::Status CreateModel(grpc::ServerContext* context,
                           const v1::CreateModelRequest* request,
                           v1::Model* response) override;
  grpc::Status LoadModel(grpc::ServerContext* context,
                         const v1::LoadModelRequest* request,
                         v1::LoadModelResponse* response) override;
  grpc::Status SaveModel(grpc::ServerContext* context,
                         const v1::SaveModelRequest* request,
                         v1::SaveModelResponse* response) override;
  grpc::Status ModelChecksum(grpc::ServerContext* context,
                             const v1::ModelChecksumRequest* request,
                             v1::ModelChecksumResponse* response) override;
  grpc::Status DeleteModel(grpc::ServerContext* context,
                           const v1::DeleteModelRequest* request,
                           v1::DeleteModelResponse* response) override;
  grpc::Status OpenSession(grpc::ServerContext* context,
                           const v1::OpenSessionRequest* request,
                           v1::Session* response) override;
  grpc::Status GetSession(grpc::ServerContext* context,
                          const v1::GetSessionRequest* request,
                          v1::Session* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context,
                            const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status RenewSession(grpc::ServerContext* context,
                            const v1::RenewSessionRequest* request,
                            v1::Session* response) override;
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  // Summon.ReadTensor. The constructor registers it in place of the
  // generated handler, which would copy every chunk twice through protobuf:
  // replies leave as raw byte buffers (proto/read_chunk_wire.h), and a
  // read-only session's bytes straight from its copy.
  grpc::Status StreamReadTensor(grpc::ServerContext* context,
                                ReadTensorStream* stream);
  grpc::Status WriteTensor(grpc::ServerContext* context,
                           grpc::ServerReader<v1::WriteTensorRequest>* reader,
                           v1::WriteTensorResponse* response) override;
  grpc::Status TensorStats(grpc::ServerContext* context,
                           const v1::TensorStatsRequest* request,
                           v1::TensorStatsResponse* response) override;
  // Watches (summon_service_watches.cc), answered by the leader.
  grpc::Status AddWatch(grpc::ServerContext* context,
                        const v1::AddWatchRequest* request,
                        v1::Watch* response) override;
  grpc::Status ListWatches(grpc::ServerContext* context,
                           const v1::ListWatchesRequest* request,
                           v1::ListWatchesResponse* response) override;
  grpc::Status RemoveWatch(grpc::ServerContext* context,
                           const v1::RemoveWatchRequest* request,
                           v1::RemoveWatchResponse* response) override;
  grpc::Status ShowWatch(grpc::ServerContext* context,
                         const v1::ShowWatchRequest* request,
                         v1::ShowWatchResponse* response) override;
  // The leader's (or single node's) watches; null: watch calls answer
  // FAILED_PRECONDITION. `replication` (a cluster): every change reaches
  // the followers' copies.
  void SetWatches(WatchStore* watches,
                  WatchReplication* replication = nullptr) {
    watches_ = watches;
    watch_replication_ = replication;
  }

  // The node's membership view (summon_service_cluster.cc), never routed.
  grpc::Status GetClusterStatus(grpc::ServerContext* context,
                                const v1::GetClusterStatusRequest* request,
                                v1::ClusterStatus* response) override;

  grpc::Status MapSession(grpc::ServerContext* context,
                          const v1::MapSessionRequest* request,
                          v1::MapSessionResponse* response) override;

  // Weight sync (summon_service_weight_sync.cc): Publish is the leader's,
  // WaitVersion and ReadSlices any node's. Null: they answer
  // FAILED_PRECONDITION.
  void SetWeightSync(WeightSync* weight_sync) { weight_sync_ = weight_sync; }
  // Where ReadSlices' cuda_buffer answers go (summond: CUDA IPC). Null:
  // cuda_buffer reads are refused (FAILED_PRECONDITION, "cuda_buffer: ...").
  void SetSliceDevices(DeviceSliceDestinations* devices) {
    slice_devices_ = devices;
  }
  grpc::Status Publish(grpc::ServerContext* context,
                       const v1::PublishRequest* request,
                       v1::PublishResponse* response) override;
  grpc::Status WaitVersion(grpc::ServerContext* context,
                           const v1::WaitVersionRequest* request,
                           v1::WaitVersionResponse* response) override;
  grpc::Status ReadSlices(
      grpc::ServerContext* context, const v1::ReadSlicesRequest* request,
      grpc::ServerWriter<v1::ReadSlicesResponse>* writer) override;

 private:
  // OK when the caller's roles allow `method` for `request` (the role
  // table of server/auth/roles.cc), else the refusal.
  grpc::Status Allow(const grpc::ServerContext& context, const char* method,
                     const google::protobuf::Message& request) const {
    return auth::CheckCall(*authorizer_, context, method, request);
  }
  std::string PrincipalOf(const grpc::ServerContext& context) const {
    return auth::PrincipalOf(*authorizer_, context);
  }
  // ModelToProto plus each rank's attached trainer and last event.
  void DescribeToProto(ModelEntry& model, v1::Model* response) const;

  // Set when the cluster layer answers the call: not READY (UNAVAILABLE),
  // or forwarded to the leader by a follower.
  template <typename Request, typename Response>
  std::optional<grpc::Status> Route(
      const grpc::ServerContext& context,
      grpc::Status (v1::Summon::Stub::*method)(grpc::ClientContext*,
                                               const Request&, Response*),
      const Request& request, Response* response) const {
    return forwarder_.Route(context, method, request, response);
  }
  // The epoch a leader's model operation goes out under, taken right before
  // it changes anything here: UNAVAILABLE once this node's leadership lapsed
  // (a deposed leader resumed from a pause changes no byte here, and the
  // followers refuse this epoch once they are in another). 0 on a single
  // node.
  absl::StatusOr<uint64_t> ActingEpoch() const;
  // The leader's model operations: this node, then every follower; the
  // first failure, naming its node.
  absl::Status CreateEverywhere(const v1::CreateModelRequest& request);
  absl::StatusOr<int64_t> LoadEverywhere(ModelEntry& model,
                                         const std::string& path, bool convert);
  // This node first, then every follower; the first failure.
  absl::Status DeleteEverywhere(const std::string& model);
  absl::StatusOr<std::vector<std::string>> SaveEverywhere(
      ModelEntry& model, const std::string& path, int64_t max_file_bytes);
  // The models' states as the cluster sees them: `states` holds this node's
  // (state, detail) by model name on entry; each becomes the worst of every
  // node's (MISSING_SHARDS > DEGRADED > AWAITING_INIT > READY), a
  // follower's detail prefixed "node N: ". A follower that does not answer
  // within kHealthTimeout fails the call, naming it.
  absl::Status FoldClusterHealth(
      std::map<std::string, std::pair<v1::ModelState, std::string>>* states);
  // For a listing, which answers with a node down: asks every other node
  // (none on a single node) as FoldClusterHealth asks the followers,
  // folding in the answers it gets; returns the nodes that did not answer
  // within kHealthTimeout.
  std::vector<int> FoldReachableHealth(
      std::map<std::string, std::pair<v1::ModelState, std::string>>* states);
  // FAILED_PRECONDITION ("model 'M' is MISSING_SHARDS: node N: ...") when
  // a follower has no shards of `model`; OK when it is unknown here (the
  // open then says so).
  absl::Status RefuseMissingOnFollowers(const std::string& model);

  // Counts a tensor stream for its lifetime; RESOURCE_EXHAUSTED beyond the
  // limit.
  class StreamSlot {
   public:
    explicit StreamSlot(SummonServiceImpl& service);
    ~StreamSlot();
    absl::Status status() const { return status_; }

   private:
    SummonServiceImpl& service_;
    absl::Status status_;
  };

  ModelRegistry* const registry_;
  SessionManager* const sessions_;
  TrainerLeases* const trainers_;
  const CheckpointRoots checkpoint_roots_;
  const auth::Authorizer* const authorizer_;
  Membership* const cluster_;
  LeaderForwarder forwarder_;
  const int max_open_streams_;
  LocalFdBroker* const fd_broker_;  // Null: no same-node mappings.
  // Callers' slice buffers, kept mapped between their reads.
  SliceBufferCache slice_buffers_{SliceBufferCache::Options{}};
  WatchStore* watches_ = nullptr;
  WatchReplication* watch_replication_ = nullptr;
  WeightSync* weight_sync_ = nullptr;
  DeviceSliceDestinations* slice_devices_ = nullptr;
  std::atomic<int> open_streams_{0};
  absl::Mutex checksum_mu_;  // Followers' answers arrive concurrently.
  absl::Mutex save_mu_;      // Saves use deterministic temporary names.
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_SUMMON_SERVICE_H_
