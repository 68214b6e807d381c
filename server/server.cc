#include "server/server.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/status_conversion.h"
#include "server/summon_service.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server {
namespace {

namespace pb = ::summon::v1;

// In-flight calls get this long to finish once shutdown starts; streams
// still open then are cancelled.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

absl::Status ValidateSpec(const SummonServer::Spec& spec) {
  if (spec.listen_address.empty() && spec.unix_socket.empty()) {
    return absl::InvalidArgumentError(
        "summond needs a listen address or a Unix socket path");
  }
  if (spec.local_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("local ranks must be at least 1, got ", spec.local_ranks));
  }
  const int node_count = spec.nodes.empty() ? 1 : spec.nodes.size();
  if (spec.node_rank < 0 || spec.node_rank >= node_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("node rank ", spec.node_rank, " is outside the ",
                     node_count, " node(s) of the cluster"));
  }
  if (node_count > 1) {
    return absl::UnimplementedError(
        "multi-node clusters are not implemented yet; omit --nodes");
  }
  if (spec.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget must not be negative, got ", spec.memory_budget_bytes));
  }
  if (spec.heartbeat_interval <= absl::ZeroDuration() ||
      spec.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "heartbeat interval and collective timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

SummonServer::SummonServer(Spec spec) : spec_(std::move(spec)) {
  core::Topology topology{
      static_cast<int>(std::max<size_t>(1, spec_.nodes.size())),
      spec_.local_ranks};
  registry_ = std::make_unique<ModelRegistry>(
      ModelRegistry::Options{spec_.data_dir, InstanceForDataDir(spec_.data_dir),
                             topology, spec_.node_rank});
  SessionManager::Options session_options;
  session_options.memory_budget_bytes = spec_.memory_budget_bytes;
  session_options.admins = spec_.admins;
  session_options.reaper_interval = spec_.reaper_interval;
  sessions_ =
      std::make_unique<SessionManager>(registry_.get(), session_options);
  summon_service_ = std::make_unique<SummonServiceImpl>(
      registry_.get(), sessions_.get(), spec_.data_dir);
  trainer_service_ =
      std::make_unique<TrainerServiceImpl>(registry_.get(), sessions_.get());
}

SummonServer::~SummonServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<SummonServer>> SummonServer::Start(Spec spec) {
  if (absl::Status valid = ValidateSpec(spec); !valid.ok()) return valid;

  // Both are process-wide switches read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  auto server = absl::WrapUnique(new SummonServer(std::move(spec)));
  // Models recorded in the data directory come back with their shards.
  if (absl::Status recovered = server->registry_->Recover(); !recovered.ok()) {
    return recovered;
  }
  const Spec& s = server->spec_;
  std::vector<std::string> listeners;
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second daemon on a taken port would
  // start and silently split the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!s.listen_address.empty()) {
    listeners.push_back(s.listen_address);
    builder.AddListeningPort(s.listen_address,
                             grpc::InsecureServerCredentials(), &server->port_);
  }
  if (!s.unix_socket.empty()) {
    listeners.push_back(absl::StrCat("unix:", s.unix_socket));
    builder.AddListeningPort(listeners.back(),
                             grpc::InsecureServerCredentials());
  }
  builder.RegisterService(server->summon_service_.get());
  builder.RegisterService(server->trainer_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", absl::StrJoin(listeners, " and "),
                     " (in use, or not a local address?)"));
  }
  // Per-service health as well as the server's (""), for probes that name
  // the service they need.
  grpc::HealthCheckServiceInterface* health =
      server->server_->GetHealthCheckService();
  health->SetServingStatus(pb::Summon::service_full_name(), true);
  health->SetServingStatus(pb::Trainer::service_full_name(), true);
  return server;
}

std::string SummonServer::address() const {
  if (port_ == 0) return "";
  const absl::string_view listen = spec_.listen_address;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port_);
}

void SummonServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

void SummonServer::Shutdown() {
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
}

}  // namespace summon::server
