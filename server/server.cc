// SummonServer: the spec checked, the rooms built (server_wiring.cc), the
// listeners started (server_listen.cc) with what /metrics shows
// (server_metrics.cc), then serving until shutdown.
#include "server/server.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
// Every room's class in full: the server owns one of each.
#include "server/cluster/kv_store.h"
#include "server/cluster/membership.h"
#include "server/metrics/summon_metrics.h"
#include "server/model/data_dir_format.h"
#include "server/model/data_dir_lock.h"
#include "server/model/model_registry.h"
#include "server/rpc/reflection_v1.h"
#include "server/runtime/buffer_pool.h"
#include "server/runtime/node_runtime.h"
#include "server/service/cluster_node_ops.h"
#include "server/service/local_fd_broker.h"
#include "server/service/peer_service.h"
#include "server/service/summon_service.h"
#include "server/service/trainer_service.h"
#include "server/session/session_manager.h"
#include "server/store/staging_pool.h"
#include "server/trainer/trainer_leases.h"
#include "server/watch/watch_partials.h"
#include "server/watch/watch_replication.h"
#include "server/watch/watch_store.h"
#include "server/watch/watcher.h"
#include "server/web/web_view.h"
#include "spdlog/spdlog.h"
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
    for (const std::string& node : spec.nodes) {
      const size_t colon = node.rfind(':');
      if (colon == std::string::npos || colon + 1 == node.size() ||
          node.substr(colon + 1) == "0") {
        return absl::InvalidArgumentError(absl::StrCat(
            "every node of --nodes needs HOST:PORT with a fixed port, got '",
            node, "'"));
      }
    }
  }
  if (spec.etcd.has_value() && node_count < 2) {
    return absl::InvalidArgumentError(
        "--coordinator etcd://... runs a cluster: give every node in --nodes "
        "(a single node needs no coordinator)");
  }
  if (spec.etcd.has_value() && spec.coordinator_lease_ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--coordinator-lease-ttl must be at least 2s (etcd's shortest "
        "lease), got ",
        absl::FormatDuration(spec.coordinator_lease_ttl)));
  }
  if (spec.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget must not be negative, got ", spec.memory_budget_bytes));
  }
  if (spec.copy_pool_bytes < 0 || spec.staging_pool_bytes < 0 ||
      spec.copy_pool_idle < absl::ZeroDuration() ||
      spec.staging_pool_idle < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--copy-pool-bytes, --copy-pool-idle, --staging-pool-bytes and "
        "--staging-pool-idle must not be negative");
  }
  if (spec.heartbeat_interval <= absl::ZeroDuration() ||
      spec.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "heartbeat interval and collective timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

SummonServer::SummonServer(Spec spec,
                           std::unique_ptr<auth::ServerSecurity> security)
    : spec_(std::move(spec)), security_(std::move(security)) {
  // Bottom up, each layer from the ones below it (server_wiring.cc).
  const std::vector<std::string> checkpoint_roots = BuildModels();
  if (spec_.nodes.size() > 1) BuildCluster();
  BuildWatches();
  BuildSessions();
  BuildWeightSync();
  BuildServices(checkpoint_roots);
}

SummonServer::~SummonServer() {
  for (int id : metric_callbacks_) {
    metrics::DefaultRegistry().RemoveCallback(id);
  }
  metrics_http_.reset();
  Shutdown();
}

absl::StatusOr<std::unique_ptr<SummonServer>> SummonServer::Start(Spec spec) {
  if (absl::Status valid = ValidateSpec(spec); !valid.ok()) return valid;
  // Before anything reads or writes the data dir: a second daemon on it
  // would re-attach the first one's models and take over their shards.
  std::unique_ptr<DataDirLock> data_dir_lock;
  if (!spec.data_dir.empty()) {
    absl::StatusOr<std::unique_ptr<DataDirLock>> locked =
        DataDirLock::Acquire(spec.data_dir);
    if (!locked.ok()) return locked.status();
    data_dir_lock = *std::move(locked);
    // Then its format: a data dir a newer release wrote is never read.
    if (absl::Status format = CheckDataDirFormat(spec.data_dir); !format.ok()) {
      return format;
    }
  }

  // Both are process-wide switches read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  // A cluster node listens where its peers reach it: its --nodes entry.
  const std::string listen =
      spec.nodes.size() > 1 ? spec.nodes[spec.node_rank] : spec.listen_address;
  std::vector<std::string> tcp_listeners;
  if (!listen.empty()) tcp_listeners.push_back(listen);
  auth::SecuritySpec security_spec = spec.security;
  security_spec.admins = spec.admins;
  absl::StatusOr<std::unique_ptr<auth::ServerSecurity>> security =
      auth::ServerSecurity::Create(std::move(security_spec), spec.data_dir,
                                   tcp_listeners, spec.nodes);
  if (!security.ok()) return security.status();
  auto server =
      absl::WrapUnique(new SummonServer(std::move(spec), std::move(*security)));
  server->data_dir_lock_ = std::move(data_dir_lock);
  // Models recorded in the data directory come back with their shards.
  if (absl::Status recovered = server->registry_->Recover(); !recovered.ok()) {
    return recovered;
  }
  // On etcd, a node whose data dir was lost (or that missed a create or a
  // delete) has its models again before it joins; reconciled again each
  // time the cluster forms (StartCluster), which also covers an etcd not
  // reachable now.
  if (server->coordinator_ != nullptr) {
    if (absl::Status reconciled = server->ReconcileModelRecords();
        !reconciled.ok()) {
      spdlog::warn("{}; reconciled when the cluster forms",
                   reconciled.ToString());
    }
  }
  // The watches and their history (R: a restart keeps them).
  if (absl::Status loaded = server->watch_store_->Load(); !loaded.ok()) {
    return loaded;
  }
  // Then the trainers' phases and leases on those models.
  if (absl::Status recovered = server->trainers_->Recover(); !recovered.ok()) {
    return recovered;
  }
  // A single node finishes (or drops) writebacks interrupted by a crash
  // now; a cluster's leader does it each time the cluster forms.
  if (server->membership_ == nullptr) {
    if (absl::Status resolved = server->sessions_->ResolvePendingCommits();
        !resolved.ok()) {
      return resolved;
    }
  }
  const Spec& s = server->spec_;
  server->RegisterMetrics();
  if (!s.metrics_listen.empty()) {
    if (absl::Status started = server->StartMetricsListener(); !started.ok()) {
      return started;
    }
  }
  if (absl::Status listening = server->Listen(listen); !listening.ok()) {
    return listening;
  }
  // A cluster serves once every node joined and connected (READY).
  server->SetServing(server->membership_ == nullptr);
  if (server->coordinator_) {
    // Registers this node under its lease and campaigns.
    if (absl::Status started = server->coordinator_->Start(); !started.ok()) {
      return started;
    }
  }
  if (server->membership_) server->StartCluster();
  return server;
}

void SummonServer::SetServing(bool serving) {
  // Per-service health as well as the server's (""), for probes that name
  // the service they need.
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    health->SetServingStatus(serving);
    health->SetServingStatus(pb::Summon::service_full_name(), serving);
    health->SetServingStatus(pb::Trainer::service_full_name(), serving);
  }
}

std::string SummonServer::address() const {
  if (port_ == 0) return "";
  const absl::string_view listen = spec_.listen_address;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port_);
}

bool SummonServer::ready() const {
  return membership_ == nullptr || membership_->ready();
}

void SummonServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

void SummonServer::Shutdown() {
  if (server_ == nullptr) return;
  trainer_service_->StopWatches();
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
  if (health_server_ != nullptr) {
    health_server_->GetHealthCheckService()->Shutdown();
    health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
}

}  // namespace summon::server
