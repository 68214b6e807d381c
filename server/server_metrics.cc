// What summond shows beside its gRPC API: the gauges /metrics reads at
// each scrape, and the metrics listener with the web view on it.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "httplib.h"
#include "server/cluster/membership.h"
#include "server/metrics/summon_metrics.h"
#include "server/model/model_registry.h"
#include "server/runtime/buffer_pool.h"
#include "server/server.h"
#include "server/session/session_manager.h"
#include "server/store/staging_pool.h"
#include "server/trainer/trainer_leases.h"
#include "server/web/web_view.h"
#include "server/weight_sync/version_store.h"

namespace summon::server {

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
  // Counts the pools keep since start: they only grow, so Prometheus's
  // rate() and increase() apply (a gauge's would not).
  auto add_counter = [&](const char* name, const char* help,
                         std::vector<std::string> labels,
                         std::function<Samples()> compute) {
    metric_callbacks_.push_back(registry.CallbackCounter(
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
  add("summon_weight_sync_version_bytes",
      "Bytes of published versions' copies this node holds: versions kept "
      "or released and still read, and spare buffers of released ones "
      "waiting for the next publish.",
      {"kind"}, [this] {
        const VersionCounters& counters = versions_->counters();
        return Samples{
            {{"versions"}, static_cast<double>(counters.bytes.load())},
            {{"spare"}, static_cast<double>(counters.spare_bytes.load())}};
      });
  // Per version and node a unit is copied once however many read it, so
  // unit_copies / (versions x units) is 1: the weight-sync "gather" is
  // shared by every reader.
  add_counter(
      "summon_weight_sync_events_total",
      "Weight sync on this node since start: versions published, unit "
      "copies taken (one per unit per version), rank units of those copied "
      "ahead in the background, ReadSlices answered, and "
      "bytes received from / sent to other nodes for slices.",
      {"event"}, [this] {
        const VersionCounters& counters = versions_->counters();
        return Samples{
            {{"versions"}, static_cast<double>(counters.versions.load())},
            {{"unit_copies"}, static_cast<double>(counters.unit_copies.load())},
            {{"units_copied_ahead"},
             static_cast<double>(counters.copied_ahead.load())},
            {{"reads"}, static_cast<double>(counters.reads.load())},
            {{"peer_bytes_received"},
             static_cast<double>(counters.peer_bytes_received.load())},
            {{"peer_bytes_sent"},
             static_cast<double>(counters.peer_bytes_sent.load())}};
      });
  add("summon_copy_pool_retained_bytes",
      "Bytes of closed sessions' copies kept mapped for the next open "
      "(--copy-pool-bytes, --copy-pool-idle).",
      {}, [this] {
        return Samples{{{}, static_cast<double>(copy_pool_->retained_bytes())}};
      });
  add_counter("summon_copy_pool_acquires_total",
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
  add_counter("summon_staging_pool_reuses_total",
      "Writebacks that staged into a spare segment instead of a fresh one, "
      "since start.",
      {}, [this] {
        return Samples{{{}, static_cast<double>(staging_pool_->reuses())}};
      });
  add_counter("summon_staging_prefaults_total",
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
      serve_page,
      absl::StrCat("without --tls-cert the web view is plain HTTP, so it is "
                   "served only on a loopback --metrics-listen; ",
                   s.metrics_listen, " is reachable from other hosts"));
}

absl::Status SummonServer::StartMetricsListener() {
  const Spec& s = spec_;
  StartWebView();
  web::WebView* web_view = web_view_.get();
  absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> http =
      metrics::MetricsHttpServer::Start(
          s.metrics_listen,
          [web_view](httplib::Server& http) { web_view->Register(http); },
          metrics::HttpTls{s.security.tls_cert, s.security.tls_key});
  if (!http.ok()) return http.status();
  metrics_http_ = std::move(*http);
  return absl::OkStatus();
}

}  // namespace summon::server
