// summond's gRPC listeners (TCP, a Unix socket, the plaintext health
// port) with their services, the audit interceptor and reflection; and a
// cluster node's start, which serves once the cluster formed.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/auth/audit_interceptor.h"
#include "server/cluster/membership.h"
#include "server/rpc/reflection_v1.h"
#include "server/runtime/node_runtime.h"
#include "server/server.h"
#include "server/service/cluster_generations.h"
#include "server/service/cluster_node_ops.h"
#include "server/service/peer_service.h"
#include "server/service/summon_service.h"
#include "server/service/trainer_service.h"
#include "server/session/session_manager.h"
#include "server/watch/watch_replication.h"
#include "spdlog/spdlog.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server {
namespace {

namespace pb = ::summon::v1;

}  // namespace

absl::Status SummonServer::Listen(const std::string& listen) {
  const Spec& s = spec_;
  std::vector<std::string> listeners;
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second daemon on a taken port would
  // start and silently split the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const std::shared_ptr<grpc::ServerCredentials>& credentials =
      security_->server_credentials();
  if (!listen.empty()) {
    listeners.push_back(listen);
    builder.AddListeningPort(listen, credentials, &port_);
  }
  if (!s.unix_socket.empty()) {
    listeners.push_back(absl::StrCat("unix:", s.unix_socket));
    builder.AddListeningPort(listeners.back(), credentials);
  }
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    Membership* membership = membership_.get();
    interceptors.push_back(std::make_unique<auth::AuditInterceptorFactory>(
        &security_->authorizer(), [membership] {
          return membership == nullptr || membership->is_leader();
        }));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  builder.RegisterService(summon_service_.get());
  builder.RegisterService(trainer_service_.get());
  std::vector<std::string> services = {
      pb::Summon::service_full_name(), pb::Trainer::service_full_name(),
      "grpc.health.v1.Health",
      grpc::reflection::v1::ServerReflection::service_full_name(),
      "grpc.reflection.v1alpha.ServerReflection"};
  if (peer_service_) {
    builder.RegisterService(peer_service_.get());
    services.push_back(pb::Peer::service_full_name());
  }
  reflection_v1_ = std::make_unique<ReflectionV1Service>(std::move(services));
  builder.RegisterService(reflection_v1_.get());
  server_ = builder.BuildAndStart();
  if (server_ != nullptr) {
    absl::MutexLock lock(&web_mu_);
    web_channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }
  if (server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", absl::StrJoin(listeners, " and "),
                     " (in use, or not a local address?)"));
  }
  if (!s.health_listen.empty()) {
    grpc::ServerBuilder health_builder;
    health_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_builder.AddListeningPort(
        s.health_listen, grpc::InsecureServerCredentials(), &health_port_);
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", s.health_listen, " (--health-listen)"));
    }
    // The process answers, whatever the cluster's state.
    health_server_->GetHealthCheckService()->SetServingStatus("liveness", true);
  }
  return absl::OkStatus();
}

void SummonServer::StartCluster() {
  SummonServer* raw = this;
  membership_->Start(
      [raw]() -> absl::Status {
        // Before anything is served: a node that lost its data dir has its
        // models again (their shards re-attached) when the first call comes.
        if (raw->coordinator_ != nullptr) {
          if (absl::Status reconciled = raw->ReconcileModelRecords();
              !reconciled.ok()) {
            return reconciled;
          }
        }
        raw->runtime_->SetAbsentNodes(raw->membership_->AbsentNodes());
        raw->runtime_->SetCommunicator(raw->membership_->communicator());
        raw->runtime_->SetDeviceCommunicator(
            raw->membership_->device_communicator());
        if (!raw->membership_->is_leader()) {
          // Sessions live in their leader's memory: any this node still
          // holds from an earlier leadership (an open that finished after
          // its failure was handled) ends, or its model would count them
          // and refuse a delete until their leases ran out.
          raw->sessions_->AbortAll(absl::UnavailableError(
              "leader lost: this node follows another leader"));
        }
        if (raw->membership_->is_leader()) {
          if (absl::Status formed = raw->sessions_->OnClusterFormed();
              !formed.ok()) {
            return formed;
          }
          // A leader new to the role holds the generations of its own load:
          // it takes the highest any node holds before it serves (issue 31).
          if (absl::Status rebuilt = RebuildLeaderGenerations(
                  *raw->membership_, *raw->registry_, *raw->sessions_);
              !rebuilt.ok()) {
            return rebuilt;
          }
          // Before serving: a leader restarted without its watch files
          // answers `watch list` with the followers' copies.
          if (absl::Status synced = raw->watch_replication_->Sync();
              !synced.ok()) {
            spdlog::warn("cluster: {}", synced.ToString());
          }
        }
        raw->SetServing(true);
        return absl::OkStatus();
      },
      [raw](const absl::Status& reason) {
        raw->SetServing(false);
        raw->cluster_ops_->CancelInFlight();
        raw->runtime_->SetCommunicator(nullptr);
        raw->runtime_->SetDeviceCommunicator(nullptr);
        raw->runtime_->Reset();
        raw->sessions_->AbortAll(reason);
      });
}

}  // namespace summon::server
