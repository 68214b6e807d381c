// summond's failover on etcd (issue 31): a 3-node cluster of real summond
// processes (one local rank each, Gloo between them, --coordinator on a
// 1- or 3-member etcd from Debian's /usr/bin/etcd), the leader's summond
// killed with SIGKILL, timed from the kill until a surviving node answers an
// open and a read of a model with the bytes it holds
// (tests/coordinator/failover_trial). Two rows: `left-down`, the killed node
// stays down and the survivors serve a replicated (HYBRID_SHARD) model
// without it (a lost machine; started again off the clock between trials);
// `restarted`, it is started again at once (a supervisor) and a FULL_SHARD
// model, which needs its rank, is read. Beside them the anchor: the lease
// TTL, the least etcd can take to let another node lead after a silent
// death. nccl-tests-style rows: `#wrong` counts trials whose new leader was
// the old one or whose epoch did not grow.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/nccl_table.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/coordinator/etcd_cluster.h"
#include "tests/coordinator/failover_trial.h"

ABSL_FLAG(int32_t, members, 1, "etcd members (1 or 3).");
ABSL_FLAG(int32_t, trials, 10, "Leader kills timed.");
ABSL_FLAG(absl::Duration, lease_ttl, absl::Seconds(2),
          "Every summond's --coordinator-lease-ttl.");

namespace summon::bench {
namespace {

constexpr char kParam[] = "layers.0.attn.w";

void PrintRow(const std::string& mode, const std::vector<double>& samples_us,
              int64_t wrong) {
  LatencyRow row;
  row.bytes = 0;
  row.count = 1;
  row.type = "failover";
  row.mode = mode;
  row.repeats = static_cast<int>(samples_us.size());
  row.p50_us = Median(samples_us);
  row.p99_us = Percentile(samples_us, 99);
  row.wrong = wrong;
  std::printf("%s\n", FormatLatencyRow(row).c_str());
}

absl::Status Run() {
  tests::EtcdCluster::Options etcd_options;
  etcd_options.members = absl::GetFlag(FLAGS_members);
  absl::StatusOr<std::unique_ptr<tests::EtcdCluster>> etcd =
      tests::EtcdCluster::Start(etcd_options);
  if (!etcd.ok()) return etcd.status();
  std::vector<std::string> endpoints = (*etcd)->client_addresses();
  tests::LocalCluster::Options options;
  options.nodes = 3;
  options.local_ranks = 1;
  options.collective_timeout = absl::Seconds(10);
  options.coordinator =
      absl::StrCat("etcd://", absl::StrJoin(endpoints, ","), "/bench");
  options.coordinator_lease_ttl = absl::GetFlag(FLAGS_lease_ttl);
  absl::StatusOr<std::unique_ptr<tests::LocalCluster>> cluster =
      tests::LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  const v1::Model sharded =
      tests::CreateSeeded((*cluster)->client(0), "m", tests::kUnevenLayout,
                          v1::SHARDING_STRATEGY_FULL_SHARD);
  const v1::Model replicated =
      tests::CreateSeeded((*cluster)->client(0), "r", tests::kUnevenLayout,
                          v1::SHARDING_STRATEGY_HYBRID_SHARD);
  struct Mode {
    const char* name;
    tests::AfterKill after;
    const v1::Model* model;
    std::vector<double> serving_us;
    int64_t wrong = 0;
  };
  Mode modes[] = {
      {"left-down", tests::AfterKill::kLeaveDown, &replicated, {}, 0},
      {"restarted", tests::AfterKill::kRestart, &sharded, {}, 0}};
  // Alternated, so a change in the machine's load falls on both alike.
  for (int trial = 0; trial < absl::GetFlag(FLAGS_trials); ++trial) {
    for (Mode& mode : modes) {
      absl::StatusOr<tests::FailoverResult> failover =
          tests::KillLeaderUntilServed(
              **cluster, mode.model->name(), kParam,
              tests::SeededModel(*mode.model).at(kParam), absl::Seconds(60),
              mode.after);
      if (!failover.ok()) return failover.status();
      mode.serving_us.push_back(
          absl::ToDoubleMicroseconds(failover->serving_again));
      if (failover->after.leader() == failover->before.leader() ||
          failover->after.epoch() <= failover->before.epoch()) {
        ++mode.wrong;
      }
    }
  }
  std::printf("%s\n", LatencyHeader("failover").c_str());
  for (const Mode& mode : modes) {
    PrintRow(mode.name, mode.serving_us, mode.wrong);
  }
  PrintRow("lease-ttl",
           {absl::ToDoubleMicroseconds(options.coordinator_lease_ttl)}, 0);
  return (*cluster)->Stop();
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = summon::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "etcd_failover_bench: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
