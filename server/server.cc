#include "server/server.h"

#include <algorithm>
#include <filesystem>
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
#include "httplib.h"
#include "server/auth/audit_interceptor.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/membership.h"
#include "server/metrics/summon_metrics.h"
#include "server/model/data_dir_lock.h"
#include "server/model/model_registry.h"
#include "server/rpc/reflection_v1.h"
#include "server/rpc/status_conversion.h"
#include "server/runtime/buffer_pool.h"
#include "server/runtime/node_runtime.h"
#include "server/service/cluster_node_ops.h"
#include "server/service/cluster_watch_nodes.h"
#include "server/service/cluster_watch_replicas.h"
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
  const auth::Authorizer* authorizer = &security_->authorizer();
  const int nodes = static_cast<int>(std::max<size_t>(1, spec_.nodes.size()));
  core::Topology topology{nodes, spec_.local_ranks};
  std::vector<std::string> checkpoint_roots = spec_.checkpoint_roots;
  if (checkpoint_roots.empty() && !spec_.data_dir.empty()) {
    const std::filesystem::path root =
        std::filesystem::path(spec_.data_dir) / "checkpoints";
    std::error_code error;
    std::filesystem::create_directories(root, error);
    checkpoint_roots.push_back(root.string());
  }
  BufferPool::Options copy_pool;
  // Retained copies never hold more than the budget lets sessions hold (R9).
  copy_pool.max_retained_bytes =
      spec_.memory_budget_bytes > 0
          ? std::min(spec_.copy_pool_bytes, spec_.memory_budget_bytes)
          : spec_.copy_pool_bytes;
  copy_pool.max_idle = spec_.copy_pool_idle;
  copy_pool_ = BufferPool::Create(copy_pool);
  staging_pool_ = std::make_shared<StagingPool>(
      StagingPool::Options{spec_.staging_pool_bytes, spec_.staging_pool_idle,
                           spec_.staging_prefault, spec_.memory_budget_bytes});
  registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
      spec_.data_dir, InstanceForDataDir(spec_.data_dir), topology,
      spec_.node_rank, spec_.device.get(),
      CheckpointRoots(checkpoint_roots).Admission(), staging_pool_});
  SessionManager::Options session_options;
  session_options.memory_budget_bytes = spec_.memory_budget_bytes;
  session_options.copy_pool = copy_pool_;
  // R12: --admins and principals the tokens file makes admin.
  session_options.is_admin = [authorizer](const std::string& principal) {
    return authorizer->IsAdmin(principal);
  };
  session_options.max_sessions_per_principal = spec_.max_sessions_per_principal;
  session_options.reaper_interval = spec_.reaper_interval;
  session_options.collective_timeout = spec_.collective_timeout;
  if (nodes > 1) {
    // Every node runs the same runtime; the leader's session manager drives
    // all of them, the followers' only forward to it.
    const absl::Duration failure_timeout =
        std::max(spec_.heartbeat_interval * 3, absl::Seconds(1));
    kv_store_ = std::make_unique<LocalKvStore>();
    membership_ = std::make_unique<Membership>(
        Membership::Spec{
            spec_.node_rank, spec_.nodes, spec_.local_ranks,
            spec_.heartbeat_interval, spec_.collective_timeout,
            std::max(spec_.heartbeat_interval * 3, absl::Seconds(1)),
            security_->peer_credentials(), spec_.device_communicator},
        kv_store_.get());
    runtime_ =
        std::make_unique<NodeRuntime>(spec_.node_rank, registry_.get(), nullptr,
                                      spec_.collective_timeout, copy_pool_);
    if (spec_.device_communicator != nullptr) runtime_->EnableDeviceExchange();
    runtime_->SetGatherParts(spec_.gather_parts);
    cluster_ops_ = std::make_unique<ClusterNodeOps>(
        membership_.get(), runtime_.get(), spec_.collective_timeout,
        failure_timeout + spec_.heartbeat_interval);
    session_options.node_ops = cluster_ops_.get();
    peer_service_ = std::make_unique<PeerServiceImpl>(
        *kv_store_, membership_.get(), registry_.get(), runtime_.get(),
        authorizer);
  }
  // Watches are recorded by the leader (followers forward their calls) and
  // copied into every follower's store; every node answers
  // NodeWatchPartials for its own ranks.
  watch_store_ =
      std::make_unique<WatchStore>(spec_.data_dir, spec_.watch_history);
  if (membership_ != nullptr) {
    watch_nodes_ = std::make_unique<ClusterWatchNodes>(
        membership_.get(), registry_.get(), spec_.collective_timeout);
    watch_replicas_ = std::make_unique<ClusterWatchReplicas>(
        membership_.get(), spec_.collective_timeout);
    watch_replication_ = std::make_unique<WatchReplication>(
        watch_store_.get(), watch_replicas_.get());
    peer_service_->SetWatches(watch_store_.get());
    peer_service_->SetCheckpointRoots(checkpoint_roots);
  } else {
    watch_nodes_ = std::make_unique<LocalWatchNodes>(registry_.get());
  }
  watcher_ = std::make_unique<Watcher>(
      watch_store_.get(), watch_nodes_.get(), &metrics::DefaultRegistry(),
      [registry = registry_.get()](const std::string& name) {
        Watcher::StepState state;
        absl::StatusOr<std::shared_ptr<ModelEntry>> model = registry->Get(name);
        if (!model.ok()) return state;
        absl::MutexLock lock(&(*model)->runtime_mu);
        state.done_step = (*model)->last_optimizer_step;
        for (core::TrainingPhase phase : (*model)->runtime.phase_per_rank) {
          state.in_optimizer |= phase == core::TrainingPhase::kOptimizer;
        }
        return state;
      },
      watch_replication_.get());
  session_options.on_step_done = [watcher = watcher_.get()](
                                     const std::string& model, int64_t step,
                                     absl::Time ended) {
    watcher->Notify(model, step, ended);
  };
  sessions_ =
      std::make_unique<SessionManager>(registry_.get(), session_options);
  TrainerLeases::Options trainer_options;
  trainer_options.data_dir = spec_.data_dir;
  // A step cut short moves the generations on every node, like a step.
  trainer_options.step_cut_short = [sessions = sessions_.get()](
                                       const std::string& model) {
    sessions->StepCutShort(model).IgnoreError();  // Logged by the manager.
  };
  trainers_ = std::make_unique<TrainerLeases>(registry_.get(), trainer_options);
  if (spec_.map_sessions) {
    // Without the broker (no Unix sockets here) clients read through
    // ReadTensor; MapSession says so.
    absl::StatusOr<std::unique_ptr<LocalFdBroker>> broker =
        LocalFdBroker::Start();
    if (broker.ok()) fd_broker_ = *std::move(broker);
  }
  summon_service_ = std::make_unique<SummonServiceImpl>(
      registry_.get(), sessions_.get(), trainers_.get(), checkpoint_roots,
      authorizer, membership_.get(), spec_.max_open_streams, fd_broker_.get());
  summon_service_->SetWatches(watch_store_.get(), watch_replication_.get());
  trainer_service_ = std::make_unique<TrainerServiceImpl>(
      registry_.get(), sessions_.get(), trainers_.get(), authorizer,
      membership_.get());
}

SummonServer::~SummonServer() {
  for (int id : metric_callbacks_) {
    metrics::DefaultRegistry().RemoveCallback(id);
  }
  metrics_http_.reset();
  Shutdown();
}

int SummonServer::metrics_port() const {
  return metrics_http_ == nullptr ? 0 : metrics_http_->port();
}

void SummonServer::RegisterMetrics() {
  using Samples = metrics::Registry::Samples;
  metrics::Registry& registry = metrics::DefaultRegistry();
  auto add = [&](const char* name, const char* help,
                 std::vector<std::string> labels,
                 std::function<Samples()> compute) {
    metric_callbacks_.push_back(registry.CallbackGauge(
        name, help, std::move(labels), std::move(compute)));
  };
  add("summon_node_up", "1 while summond runs.", {}, [] {
    return Samples{{{}, 1}};
  });
  add("summon_node_ready",
      "1 once the cluster is READY (a single node: once started).", {}, [this] {
        return Samples{{{}, ready() ? 1.0 : 0.0}};
      });
  add("summon_sessions_open",
      "Sessions held by the session manager (the leader in a cluster), by "
      "kind.",
      {"kind"}, [this] {
        const SessionManager::Usage usage = sessions_->CurrentUsage();
        return Samples{
            {{"readonly"}, static_cast<double>(usage.readonly_sessions)},
            {{"writable"}, static_cast<double>(usage.writable_sessions)}};
      });
  add("summon_memory_budget_used_bytes",
      "Bytes of session copies reserved against the memory budget, by node "
      "(as the session manager, the leader in a cluster, accounts them).",
      {"node"}, [this] {
        Samples samples;
        const SessionManager::Usage usage = sessions_->CurrentUsage();
        for (size_t node = 0; node < usage.memory_per_node.size(); ++node) {
          samples.push_back({{absl::StrCat(node)},
                             static_cast<double>(usage.memory_per_node[node])});
        }
        return samples;
      });
  add("summon_memory_budget_bytes",
      "The memory budget of each node (--memory-budget); 0: no limit.", {},
      [this] {
        return Samples{{{}, static_cast<double>(spec_.memory_budget_bytes)}};
      });
  add("summon_copy_pool_retained_bytes",
      "Bytes of closed sessions' copies kept mapped for the next open "
      "(--copy-pool-bytes, --copy-pool-idle).",
      {}, [this] {
        return Samples{{{}, static_cast<double>(copy_pool_->retained_bytes())}};
      });
  add("summon_copy_pool_acquires",
      "Session copies' memory by where it came from: reused from the pool or "
      "freshly mapped (page-faulted on first write), since start.",
      {"source"}, [this] {
        return Samples{{{"reused"}, static_cast<double>(copy_pool_->reuses())},
                       {{"fresh"}, static_cast<double>(copy_pool_->fresh())}};
      });
  add("summon_staging_pool_retained_bytes",
      "Bytes of spare staged segments kept in /dev/shm for the next "
      "writeback (--staging-pool-bytes, --staging-pool-idle).",
      {}, [this] {
        return Samples{
            {{}, static_cast<double>(staging_pool_->retained_bytes())}};
      });
  add("summon_staging_pool_reuses",
      "Writebacks that staged into a spare segment instead of a fresh one, "
      "since start.",
      {}, [this] {
        return Samples{{{}, static_cast<double>(staging_pool_->reuses())}};
      });
  add("summon_staging_prefaults",
      "Spare staged segments made and page-faulted when a writable session "
      "opened (done), or skipped for want of room in the staging pool or "
      "the memory budget (refused), since start.",
      {"result"}, [this] {
        return Samples{
            {{"done"}, static_cast<double>(staging_pool_->prefaults())},
            {{"refused"},
             static_cast<double>(staging_pool_->prefault_refusals())}};
      });
  add("summon_shard_shm_bytes",
      "Bytes of this node's shard segments in shared memory.", {}, [this] {
        double bytes = 0;
        for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
          if (model->store != nullptr) {
            bytes += static_cast<double>(model->store->TotalBytes());
          }
        }
        return Samples{{{}, bytes}};
      });
  add("summon_trainers_attached",
      "Trainer incarnations attached to this node's models.", {}, [this] {
        double attached = 0;
        for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
          attached += trainers_->AttachedTrainers(model->name).size();
        }
        return Samples{{{}, attached}};
      });
  add("summon_trainer_ranks",
      "This node's shard-owning ranks by training phase, over all models.",
      {"phase"}, [this] {
        std::map<std::string, double> by_phase;
        for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
          absl::MutexLock lock(&model->runtime_mu);
          for (int rank : model->local_ranks) {
            if (rank < 0 || static_cast<size_t>(rank) >=
                                model->runtime.phase_per_rank.size()) {
              continue;
            }
            by_phase[std::string(core::TrainingPhaseName(
                model->runtime.phase_per_rank[rank]))] += 1;
          }
        }
        Samples samples;
        for (const auto& [phase, count] : by_phase) {
          samples.push_back({{phase}, count});
        }
        return samples;
      });
  if (membership_ != nullptr) {
    add("summon_leader_epoch",
        "The cluster's epoch as this node knows it (changes each time the "
        "cluster forms; 0 while not formed).",
        {}, [this] {
          return Samples{{{}, static_cast<double>(membership_->epoch())}};
        });
    add("summon_peer_heartbeat_age_seconds",
        "Leader: seconds since each follower's last heartbeat.", {"node"},
        [this] {
          Samples samples;
          for (const auto& [node, age] : membership_->HeartbeatAges()) {
            samples.push_back(
                {{absl::StrCat(node)}, absl::ToDoubleSeconds(age)});
          }
          return samples;
        });
  }
}

void SummonServer::StartWebView() {
  const Spec& s = spec_;
  // With TLS the listener speaks HTTPS (Start below). Without it, viewer
  // tokens and cookies would cross the network in the clear: the page is
  // served only on a loopback listener (as --insecure-local is).
  const bool serve_page =
      s.security.tls() || web::MayServePlaintext(s.metrics_listen);
  web_view_ = std::make_unique<web::WebView>(
      &security_->authorizer(),
      [this]() -> std::shared_ptr<grpc::Channel> {
        absl::MutexLock lock(&web_mu_);
        return web_channel_;
      },
      [this] {
        web::ClusterView view;
        view.node_rank = spec_.node_rank;
        view.nodes = spec_.nodes;
        if (view.nodes.empty()) view.nodes.push_back(address());
        if (membership_ != nullptr) {
          view.epoch = membership_->epoch();
          const absl::Status ready = membership_->CheckReady();
          view.ready = ready.ok();
          view.failure = std::string(ready.message());
          for (const auto& [node, age] : membership_->HeartbeatAges()) {
            view.heartbeat_age_s[node] = absl::ToDoubleSeconds(age);
          }
        }
        return view;
      },
      serve_page,
      absl::StrCat("without --tls-cert the web view is plain HTTP, so it is "
                   "served only on a loopback --metrics-listen; ",
                   s.metrics_listen, " is reachable from other hosts"));
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
    server->StartWebView();
    web::WebView* web_view = server->web_view_.get();
    absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> http =
        metrics::MetricsHttpServer::Start(
            s.metrics_listen,
            [web_view](httplib::Server& http) { web_view->Register(http); },
            metrics::HttpTls{s.security.tls_cert, s.security.tls_key});
    if (!http.ok()) return http.status();
    server->metrics_http_ = std::move(*http);
  }
  std::vector<std::string> listeners;
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second daemon on a taken port would
  // start and silently split the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const std::shared_ptr<grpc::ServerCredentials>& credentials =
      server->security_->server_credentials();
  if (!listen.empty()) {
    listeners.push_back(listen);
    builder.AddListeningPort(listen, credentials, &server->port_);
  }
  if (!s.unix_socket.empty()) {
    listeners.push_back(absl::StrCat("unix:", s.unix_socket));
    builder.AddListeningPort(listeners.back(), credentials);
  }
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    Membership* membership = server->membership_.get();
    interceptors.push_back(std::make_unique<auth::AuditInterceptorFactory>(
        &server->security_->authorizer(), [membership] {
          return membership == nullptr || membership->is_leader();
        }));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  builder.RegisterService(server->summon_service_.get());
  builder.RegisterService(server->trainer_service_.get());
  std::vector<std::string> services = {
      pb::Summon::service_full_name(), pb::Trainer::service_full_name(),
      "grpc.health.v1.Health",
      grpc::reflection::v1::ServerReflection::service_full_name(),
      "grpc.reflection.v1alpha.ServerReflection"};
  if (server->peer_service_) {
    builder.RegisterService(server->peer_service_.get());
    services.push_back(pb::Peer::service_full_name());
  }
  server->reflection_v1_ =
      std::make_unique<ReflectionV1Service>(std::move(services));
  builder.RegisterService(server->reflection_v1_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ != nullptr) {
    absl::MutexLock lock(&server->web_mu_);
    server->web_channel_ =
        server->server_->InProcessChannel(grpc::ChannelArguments());
  }
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", absl::StrJoin(listeners, " and "),
                     " (in use, or not a local address?)"));
  }
  if (!s.health_listen.empty()) {
    grpc::ServerBuilder health_builder;
    health_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_builder.AddListeningPort(s.health_listen,
                                    grpc::InsecureServerCredentials(),
                                    &server->health_port_);
    server->health_server_ = health_builder.BuildAndStart();
    if (server->health_server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", s.health_listen, " (--health-listen)"));
    }
    // The process answers, whatever the cluster's state.
    server->health_server_->GetHealthCheckService()->SetServingStatus(
        "liveness", true);
  }
  // A cluster serves once every node joined and connected (READY).
  server->SetServing(server->membership_ == nullptr);
  if (server->membership_) {
    SummonServer* raw = server.get();
    server->membership_->Start(
        [raw]() -> absl::Status {
          raw->runtime_->SetCommunicator(raw->membership_->communicator());
          raw->runtime_->SetDeviceCommunicator(
              raw->membership_->device_communicator());
          if (raw->membership_->is_leader()) {
            if (absl::Status formed = raw->sessions_->OnClusterFormed();
                !formed.ok()) {
              return formed;
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
