#ifndef SUMMON_SERVER_SERVER_H_
#define SUMMON_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/auth/server_security.h"
#include "server/cluster/peer_protocol.h"
#include "server/comm/communicator.h"
#include "server/coordinator/coordinator_url.h"
#include "server/coordinator/etcd_access.h"
#include "server/store/shard_memory.h"

namespace summon::server {

class ClusterNodeOps;
class Coordinator;
class LocalKvStore;
class Membership;
namespace metrics {
class MetricsHttpServer;
}  // namespace metrics
namespace web {
class WebView;
}  // namespace web
class BufferPool;
class DataDirLock;
class ModelRegistry;
class NodeRuntime;
class PeerServiceImpl;
class ReflectionV1Service;
class SessionManager;
class StagingPool;
class SummonServiceImpl;
class TrainerLeases;
class TrainerServiceImpl;
class WatchNodes;
class WatchReplicas;
class WatchReplication;
class WatchStore;
class Watcher;
class VersionNodes;
class VersionStore;
class WeightSync;
class DeviceSliceDestinations;
class LocalFdBroker;

// summond's gRPC server: the Summon and Trainer services, grpc.health.v1 and
// server reflection (so grpcurl list/describe work).
class SummonServer {
 public:
  struct Spec {
    // HOST:PORT to listen on; port 0 picks a free port (see port()). Empty:
    // no TCP listener (then unix_socket must be set).
    std::string listen_address = "127.0.0.1:0";
    // Path of a Unix domain socket to listen on as well. Empty: none.
    std::string unix_socket;
    // L: shard-owning ranks hosted by this daemon.
    int local_ranks = 1;
    // This daemon's position in `nodes`.
    int node_rank = 0;
    // HOST:PORT of every node's daemon, the same list on every node (node 0
    // leads). Empty: a single node. In a cluster a node listens on its own
    // entry (a fixed port), not on listen_address.
    std::vector<std::string> nodes;
    // A cluster's coordinator (--coordinator): nullopt, the static mode
    // (node 0 of `nodes` leads); set, etcd at these endpoints elects the
    // leader among `nodes` (any of them may lead) and keeps the epoch and
    // the rendezvous.
    std::optional<CoordinatorUrl> etcd;
    // How etcd is reached: TLS, client certificate, user and password.
    EtcdAccess etcd_access;
    // The etcd lease of each node: a dead leader is replaced after about
    // this long (up to twice as long when etcd's own leader changes).
    absl::Duration coordinator_lease_ttl = absl::Seconds(5);
    // The Peer protocol versions this node speaks (--testing-peer-protocol
    // rehearses a node of another release; a join across releases needs a
    // version in common).
    PeerProtocol peer_protocol = kPeerProtocol;
    // Where models are recorded (so a restarted daemon re-attaches their
    // shared-memory shards). Empty: nothing is recorded; shards die with the
    // daemon.
    std::string data_dir;
    // The only directories checkpoints are loaded from and saved to (R20);
    // relative paths are taken beneath the first. Empty: <data_dir>/
    // checkpoints (created), or none without a data dir (loads and saves
    // are then refused).
    std::vector<std::string> checkpoint_roots;
    // Most bytes this node's session copies may take (rule R9). 0: no limit.
    int64_t memory_budget_bytes = 0;
    // Session copies' memory kept after their sessions close, for the next
    // open of a similar size (BufferPool, docs/operations.md): at most
    // copy_pool_bytes (and never more than memory_budget_bytes when that is
    // set), each mapping for copy_pool_idle unused. 0 bytes: keep none.
    int64_t copy_pool_bytes = int64_t{1} << 30;
    absl::Duration copy_pool_idle = absl::Minutes(10);
    // Spare staging segments kept in /dev/shm after a commit, for the next
    // writeback (StagingPool): at most staging_pool_bytes over all models,
    // each for staging_pool_idle unused. 0 bytes: keep none.
    int64_t staging_pool_bytes = int64_t{1} << 30;
    absl::Duration staging_pool_idle = absl::Minutes(10);
    // Pre-fault each local rank's spare staging when a writable session
    // opens (ShardStore::PrefaultStaging): within staging_pool_bytes and
    // memory_budget_bytes, else skipped.
    bool staging_prefault = true;
    // Parts a large gather between nodes runs in, each part's local copy
    // overlapped with the previous part's exchange (NodeRuntime's pipelined
    // gather, docs/architecture.md#placement): at most this many, each 8 MiB
    // or more. 1: no overlap (copy, then exchange). Every node alike.
    int gather_parts = 8;
    // Principals allowed to operate any session (R12).
    std::vector<std::string> admins;
    // Most sessions one principal may hold at once; 0: no limit.
    int max_sessions_per_principal = 64;
    // Records kept per watched parameter (docs/operations.md, watches).
    int watch_history = 1000;
    // Most tensor streams (reads and writes) in flight at once; more are
    // refused with RESOURCE_EXHAUSTED. 0: no limit.
    int max_open_streams = 256;
    // Weight sync: published versions kept per model (the oldest released
    // beyond it), and the most bytes one ReadSlices answers.
    int max_versions = 2;
    int64_t max_read_bytes = int64_t{64} << 30;
    // Other nodes' pieces of a ReadSlices: fetched in batches of at most
    // this many bytes, this many at once (WeightSync::Options).
    int64_t slice_fetch_bytes = int64_t{8} << 20;
    int slice_fetches_in_flight = 4;
    // How often expired leases are looked for.
    absl::Duration reaper_interval = absl::Milliseconds(200);
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration collective_timeout = absl::Seconds(30);
    // HOST:PORT serving GET /metrics (Prometheus text format); port 0 picks
    // a free port (see metrics_port()). Empty: no metrics endpoint.
    std::string metrics_listen;
    // HOST:PORT serving only grpc.health.v1.Health, in plaintext and to
    // anyone: the kubelet's gRPC probes speak neither TLS nor tokens. It
    // answers "" (SERVING once the cluster is READY), the services' names,
    // and "liveness" (SERVING while the process works). Empty: none.
    std::string health_listen;
    // TLS, tokens, insecure-local mode, the audit log (server/auth).
    auth::SecuritySpec security;
    // Where the shards live: null keeps them in host shared memory; a
    // provider places them in its (device) memory (summond --device cuda,
    // or a fake device in tests). See ShardStore.
    std::shared_ptr<const ShardMemoryProvider> device;
    // Where ReadSlices answers a cuda_buffer request (weight_sync.proto):
    // summond's CUDA IPC destinations (server/gpu), whatever --device is
    // (the caller's GPU memory, not the shards', is written), or a fake in
    // tests. Null: such reads are refused (FAILED_PRECONDITION).
    std::shared_ptr<DeviceSliceDestinations> slice_devices;
    // In a cluster of device-placed nodes: the communicator that gathers
    // session copies in device memory (summond --gather-transport nccl: one
    // NCCL rank per node on its first GPU; tests: Gloo over the fake
    // device's memory). Null: Gloo through host buffers. Every node must set
    // it alike.
    DeviceCommunicatorFactory device_communicator;
    // Serve MapSession (read-only session copies mapped by clients on this
    // host through an abstract Unix socket). False: MapSession answers
    // FAILED_PRECONDITION and clients read through ReadTensor.
    bool map_sessions = true;
  };

  // Validates `spec`, binds the listeners and starts serving.
  // INVALID_ARGUMENT for a bad spec, UNAVAILABLE when a listener cannot bind.
  static absl::StatusOr<std::unique_ptr<SummonServer>> Start(Spec spec);

  SummonServer(const SummonServer&) = delete;
  SummonServer& operator=(const SummonServer&) = delete;
  // Shuts down if still serving.
  ~SummonServer();

  const Spec& spec() const { return spec_; }
  // The bound TCP port (the chosen one for port 0); 0 without TCP listener.
  int port() const { return port_; }
  // listen_address with the bound port, e.g. "127.0.0.1:40123"; empty
  // without TCP listener.
  std::string address() const;
  // The bound port of health_listen; 0 without one.
  int health_port() const { return health_port_; }
  // Re-reads the tokens file (SIGHUP).
  absl::Status ReloadTokens() { return security_->ReloadTokens(); }
  // The bound metrics port; 0 without --metrics-listen.
  int metrics_port() const;

  // True once the cluster is READY (every node joined and connected); a
  // single node is ready as soon as it started.
  bool ready() const;

  // Blocks until Shutdown() has completed (from another thread).
  void Wait();
  // Reports NOT_SERVING to health checks, stops accepting calls and gives
  // in-flight calls a short grace period before cancelling them. Idempotent.
  void Shutdown();

 private:
  SummonServer(Spec spec, std::unique_ptr<auth::ServerSecurity> security);

  // The wiring of each layer, bottom up, each from what the layers below
  // built (server_wiring.cc). The pools and the model registry; returns the
  // checkpoint roots loads and saves are confined to.
  std::vector<std::string> BuildModels();
  // A cluster's key-value store, membership, runtime, node ops and Peer
  // service (none of them on a single node).
  void BuildCluster();
  // The watch store, this node's or the cluster's partials, the followers'
  // copies and the watcher.
  void BuildWatches();
  // The session manager and the trainers' leases.
  void BuildSessions();
  // Published versions and their reads (server/weight_sync/).
  void BuildWeightSync();
  // The fd broker and the Summon and Trainer services.
  void BuildServices(const std::vector<std::string>& checkpoint_roots);

  // Binds the gRPC listeners (and the health listener) and serves on them
  // (server_listen.cc). UNAVAILABLE when one cannot bind.
  absl::Status Listen(const std::string& listen);
  // A cluster node: joins, and serves each time the cluster forms.
  void StartCluster();
  // On a coordinator (etcd): the leader publishes every change of the model
  // registry's records there before it is made, and each node makes its
  // registry what those records say at its start and each time the cluster
  // forms, so a node that lost its data dir (or missed a create or delete)
  // rebuilds it (server_wiring.cc).
  void PublishModelRecords();
  absl::Status ReconcileModelRecords();

  // The metrics listener with the web view on it (server_metrics.cc).
  absl::Status StartMetricsListener();
  // Builds web_view_ for the metrics listener.
  void StartWebView();

  // Marks the server and its services SERVING or not, on both listeners.
  void SetServing(bool serving);

  // Held from before anything touches the data dir until after everything
  // else is gone (declared first, destroyed last). Null without a data dir.
  std::unique_ptr<DataDirLock> data_dir_lock_;
  Spec spec_;
  std::unique_ptr<auth::ServerSecurity> security_;
  int port_ = 0;
  int health_port_ = 0;
  // Shared by the runtime (copies) and every model's store (staging); read
  // by /metrics.
  std::shared_ptr<BufferPool> copy_pool_;
  std::shared_ptr<StagingPool> staging_pool_;
  std::unique_ptr<ModelRegistry> registry_;
  // A cluster's pieces (null on a single node). Declared before the session
  // manager, which uses them, so they are destroyed after it.
  std::unique_ptr<LocalKvStore> kv_store_;
  // etcd's (Spec::etcd), before the membership that uses it; null static.
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::unique_ptr<ClusterNodeOps> cluster_ops_;
  std::unique_ptr<PeerServiceImpl> peer_service_;
  // Before sessions_: the interlock notifies the watcher until the session
  // manager is gone.
  std::unique_ptr<WatchStore> watch_store_;
  std::unique_ptr<WatchNodes> watch_nodes_;
  // A cluster only: the followers' copies of the watches.
  std::unique_ptr<WatchReplicas> watch_replicas_;
  std::unique_ptr<WatchReplication> watch_replication_;
  std::unique_ptr<Watcher> watcher_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<TrainerLeases> trainers_;
  std::unique_ptr<VersionStore> versions_;
  std::unique_ptr<VersionNodes> version_nodes_;
  std::unique_ptr<WeightSync> weight_sync_;
  // Outlives the service that grants and dies before the sessions its
  // grants ask about.
  std::unique_ptr<LocalFdBroker> fd_broker_;
  std::unique_ptr<SummonServiceImpl> summon_service_;
  std::unique_ptr<TrainerServiceImpl> trainer_service_;
  std::unique_ptr<ReflectionV1Service> reflection_v1_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  // Scrape-time gauges of this server in the process's metrics registry.
  std::vector<int> metric_callbacks_;
  // The web view on the metrics listener; it reaches the Summon service
  // over an in-process channel, set once the gRPC server runs.
  std::unique_ptr<web::WebView> web_view_;
  mutable absl::Mutex web_mu_;
  std::shared_ptr<grpc::Channel> web_channel_ ABSL_GUARDED_BY(web_mu_);
  std::unique_ptr<metrics::MetricsHttpServer> metrics_http_;

  void RegisterMetrics();
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVER_H_
