#ifndef SUMMON_SERVER_SERVICE_TRAINER_SERVICE_H_
#define SUMMON_SERVER_SERVICE_TRAINER_SERVICE_H_

#include <atomic>
#include <string>

#include "server/auth/authorizer.h"
#include "server/cluster/membership.h"
#include "server/model/model_registry.h"
#include "server/service/forwarding.h"
#include "server/session/session_manager.h"
#include "server/trainer/trainer_leases.h"
#include "server/weight_sync/weight_sync.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server {

// summon.v1.Trainer: leases (R17), training phases (R1, R3, R4, R16 inputs),
// shard mapping, init external and external-write watches (R18). Calls that
// change the cluster-wide training state run on the leader (followers
// forward them); MapShards and WatchUnits answer from this node's shards.
class TrainerServiceImpl final : public v1::Trainer::Service {
 public:
  TrainerServiceImpl(ModelRegistry* registry, SessionManager* sessions,
                     TrainerLeases* trainers,
                     const auth::Authorizer* authorizer,
                     Membership* cluster = nullptr);

  grpc::Status Attach(grpc::ServerContext* context,
                      const v1::AttachRequest* request,
                      v1::AttachResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::TrainerHeartbeatRequest* request,
                         v1::TrainerHeartbeatResponse* response) override;
  grpc::Status Detach(grpc::ServerContext* context,
                      const v1::DetachRequest* request,
                      v1::DetachResponse* response) override;
  grpc::Status ReportPhase(grpc::ServerContext* context,
                           const v1::ReportPhaseRequest* request,
                           v1::ReportPhaseResponse* response) override;
  grpc::Status MapShards(grpc::ServerContext* context,
                         const v1::MapShardsRequest* request,
                         v1::MapShardsResponse* response) override;
  grpc::Status MarkInitialized(grpc::ServerContext* context,
                               const v1::MarkInitializedRequest* request,
                               v1::MarkInitializedResponse* response) override;
  grpc::Status WatchUnits(
      grpc::ServerContext* context, const v1::WatchUnitsRequest* request,
      grpc::ServerWriter<v1::WatchUnitsResponse>* writer) override;

  // Where the trainers' end-of-step publishes go (ReportPhaseRequest's
  // publish_step); null: such a report is FAILED_PRECONDITION.
  void SetWeightSync(WeightSync* weight_sync) { weight_sync_ = weight_sync; }

  // Ends every WatchUnits stream (CANCELLED) so that a shutdown does not
  // wait for its grace period.
  void StopWatches() { stopping_.store(true); }

 private:
  // The trainer of local `rank` is about to write its shards (R15):
  // published versions still referring to them copy its units first
  // (ModelRegistry::BeforeShardsWrite, server/weight_sync/version_store.h).
  void BeforeTrainerWrites(const std::string& model_name, int rank);
  // OK when the caller's roles allow `method` for `request` (the role
  // table of server/auth/roles.cc), else the refusal.
  grpc::Status Allow(const grpc::ServerContext& context, const char* method,
                     const google::protobuf::Message& request) const {
    return auth::CheckCall(*authorizer_, context, method, request);
  }
  std::string PrincipalOf(const grpc::ServerContext& context) const {
    return auth::PrincipalOf(*authorizer_, context);
  }

  ModelRegistry* const registry_;
  SessionManager* const sessions_;
  TrainerLeases* const trainers_;
  const auth::Authorizer* const authorizer_;
  LeaderForwarder forwarder_;
  std::atomic<bool> stopping_{false};
  WeightSync* weight_sync_ = nullptr;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_TRAINER_SERVICE_H_
