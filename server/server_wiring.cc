// SummonServer's rooms wired together, bottom up, one function a layer
// (docs/architecture.md, the house): the pools and the model registry; a
// cluster's membership, runtime and Peer service; the watches; the session
// manager and the trainers' leases; the gRPC services on top. Each takes
// what the layers below it built.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/checkpoint/checkpoint_roots.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/membership.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/etcd_access.h"
#include "server/coordinator/etcd_coordinator.h"
#include "server/metrics/summon_metrics.h"
#include "server/model/model_registry.h"
#include "server/runtime/buffer_pool.h"
#include "server/runtime/node_runtime.h"
#include "server/server.h"
#include "server/service/cluster_node_ops.h"
#include "server/service/cluster_version_nodes.h"
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
#include "server/weight_sync/version_nodes.h"
#include "server/weight_sync/version_store.h"
#include "server/weight_sync/weight_sync.h"

namespace summon::server {

std::vector<std::string> SummonServer::BuildModels() {
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
  return checkpoint_roots;
}

void SummonServer::BuildCluster() {
  // Every node runs the same runtime; the leader's session manager drives
  // all of them, the followers' only forward to it.
  const absl::Duration failure_timeout =
      std::max(spec_.heartbeat_interval * 3, absl::Seconds(1));
  kv_store_ = std::make_unique<LocalKvStore>();
  if (spec_.etcd.has_value()) {
    EtcdCoordinator::Options options;
    options.etcd.endpoints = spec_.etcd->endpoints;
    options.etcd.credentials = spec_.etcd_access.credentials;
    options.etcd.user = spec_.etcd_access.user;
    options.etcd.password = spec_.etcd_access.password;
    if (!spec_.etcd_access.password_file.empty()) {
      // A rotated password (the Secret's file rewritten) is taken at the
      // next authentication, without a restart.
      options.etcd.read_password = [path = spec_.etcd_access.password_file] {
        return ReadEtcdPassword(path);
      };
    }
    options.cluster = spec_.etcd->cluster;
    options.node = spec_.node_rank;
    options.address = spec_.nodes[spec_.node_rank];
    options.lease_ttl = spec_.coordinator_lease_ttl;
    // A fifth of the lease, at least the 1 s drift allowance of
    // docs/architecture.md ("The coordinator"), under half of it.
    options.validity_margin =
        std::max(spec_.coordinator_lease_ttl / 5,
                 std::min(absl::Seconds(1), spec_.coordinator_lease_ttl / 3));
    coordinator_ = std::make_unique<EtcdCoordinator>(std::move(options));
  }
  membership_ = std::make_unique<Membership>(
      Membership::Spec{spec_.node_rank, spec_.nodes, spec_.local_ranks,
                       spec_.heartbeat_interval, spec_.collective_timeout,
                       std::max(spec_.heartbeat_interval * 3, absl::Seconds(1)),
                       security_->peer_credentials(), spec_.device_communicator,
                       coordinator_.get(), spec_.peer_protocol},
      kv_store_.get());
  if (coordinator_ != nullptr) PublishModelRecords();
  runtime_ =
      std::make_unique<NodeRuntime>(spec_.node_rank, registry_.get(), nullptr,
                                    spec_.collective_timeout, copy_pool_);
  if (spec_.device_communicator != nullptr) runtime_->EnableDeviceExchange();
  runtime_->SetGatherParts(spec_.gather_parts);
  cluster_ops_ = std::make_unique<ClusterNodeOps>(
      membership_.get(), runtime_.get(), spec_.collective_timeout,
      failure_timeout + spec_.heartbeat_interval);
  peer_service_ = std::make_unique<PeerServiceImpl>(
      *kv_store_, membership_.get(), registry_.get(), runtime_.get(),
      &security_->authorizer());
}

void SummonServer::PublishModelRecords() {
  registry_->SetRecordHook(
      [this](const std::string& name, const std::string& record) {
        // A follower applies the leader's change, already published. A
        // leader whose leadership lapsed is refused by the fence (and so is
        // the change), as is one whose epoch was deposed.
        if (membership_->leader() != spec_.node_rank) return absl::OkStatus();
        return coordinator_->Put(
            coordinator_keys::Model(name), record,
            Coordinator::Fence{membership_->epoch(), /*leader=*/true});
      });
}

absl::Status SummonServer::ReconcileModelRecords() {
  absl::StatusOr<std::map<std::string, std::string>> listed =
      coordinator_->List(coordinator_keys::kModelsPrefix);
  if (!listed.ok()) {
    return absl::Status(listed.status().code(),
                        absl::StrCat("the model records on the coordinator: ",
                                     listed.status().message()));
  }
  std::map<std::string, std::string> records;
  for (auto& [key, record] : *listed) {
    records.emplace(key.substr(sizeof(coordinator_keys::kModelsPrefix) - 1),
                    std::move(record));
  }
  registry_->Reconcile(records);
  return absl::OkStatus();
}

void SummonServer::BuildWatches() {
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
}

void SummonServer::BuildSessions() {
  const auth::Authorizer* authorizer = &security_->authorizer();
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
  // Null on a single node: the manager's own node alone.
  session_options.node_ops = cluster_ops_.get();
  session_options.coordinator = coordinator_.get();
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
  trainer_options.step_cut_short =
      [sessions = sessions_.get()](const std::string& model) {
        sessions->StepCutShort(model).IgnoreError();  // Logged by the manager.
      };
  trainers_ = std::make_unique<TrainerLeases>(registry_.get(), trainer_options);
}

void SummonServer::BuildWeightSync() {
  // Every node keeps its own ranks' copies of each version and answers
  // reads; the leader's Publish has every node take its copy.
  versions_ =
      std::make_unique<VersionStore>(registry_.get(), spec_.max_versions);
  if (membership_ != nullptr) {
    version_nodes_ = std::make_unique<ClusterVersionNodes>(
        membership_.get(), versions_.get(), spec_.collective_timeout);
    peer_service_->SetVersions(versions_.get());
  } else {
    version_nodes_ = std::make_unique<LocalVersionNodes>(versions_.get());
  }
  weight_sync_ = std::make_unique<WeightSync>(
      registry_.get(), sessions_.get(), versions_.get(), version_nodes_.get(),
      WeightSync::Options{spec_.node_rank, spec_.max_read_bytes,
                          spec_.slice_fetch_bytes,
                          spec_.slice_fetches_in_flight});
}

void SummonServer::BuildServices(
    const std::vector<std::string>& checkpoint_roots) {
  const auth::Authorizer* authorizer = &security_->authorizer();
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
  summon_service_->SetSliceDevices(spec_.slice_devices.get());
  summon_service_->SetWatches(watch_store_.get(), watch_replication_.get());
  summon_service_->SetWeightSync(weight_sync_.get());
  if (peer_service_ != nullptr) {
    peer_service_->SetCheckpointRoots(checkpoint_roots);
  }
  trainer_service_ = std::make_unique<TrainerServiceImpl>(
      registry_.get(), sessions_.get(), trainers_.get(), authorizer,
      membership_.get());
  trainer_service_->SetWeightSync(weight_sync_.get());
}

}  // namespace summon::server
