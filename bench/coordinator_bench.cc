// What the etcd coordinator costs on this machine (issue 31): one fenced
// transaction (a leader's put, a commit decision), a linearizable read, and
// how long leadership takes to move to the next candidate when the leader
// resigns (Stop: its lease revoked) and when it falls silent (keepalives
// stopped, as a paused or partitioned leader: the lease must expire). etcd
// runs from Debian's /usr/bin/etcd on free loopback ports (the tests'
// harness), 1 or 3 members. nccl-tests-style latency rows; the session
// column names the call: put (a leader-fenced put), decide (a commit
// decision: a create under the leader's fence), get (a linearizable read),
// resign and expiry (a hand-over, 2 s lease, 500 ms margin).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/nccl_table.h"
#include "server/coordinator/etcd_coordinator.h"
#include "tests/coordinator/coordinator_testing.h"
#include "tests/coordinator/etcd_cluster.h"

ABSL_FLAG(int32_t, members, 1, "etcd members (1 or 3).");
ABSL_FLAG(int32_t, txns, 200, "Timed repetitions of each etcd call.");
ABSL_FLAG(int32_t, trials, 10, "Hand-overs timed per kind.");
ABSL_FLAG(int32_t, value_bytes, 64, "Bytes of each value written.");

namespace summon::bench {
namespace {

using server::Coordinator;
using server::EtcdCoordinator;

constexpr absl::Duration kWait = absl::Seconds(30);

double Micros(absl::Duration duration) {
  return absl::ToDoubleMicroseconds(duration);
}

void PrintRow(const std::string& type, const std::string& mode, int64_t bytes,
              const std::vector<double>& samples_us, int64_t wrong) {
  LatencyRow row;
  row.bytes = bytes;
  row.count = 1;
  row.type = type;
  row.mode = mode;
  row.repeats = static_cast<int>(samples_us.size());
  row.p50_us = Median(samples_us);
  row.p99_us = Percentile(samples_us, 99);
  row.wrong = wrong;
  std::printf("%s\n", FormatLatencyRow(row).c_str());
}

// Times `txns` of each call through a leader; `wrong` counts values read
// back different from what was written.
absl::Status TimeCalls(tests::EtcdCluster& etcd, int txns, int value_bytes) {
  std::unique_ptr<EtcdCoordinator> leader = tests::MakeCoordinator(
      0, etcd.client_addresses(), "bench-calls", absl::Seconds(5),
      absl::Seconds(1), absl::Seconds(3));
  if (absl::Status started = leader->Start(); !started.ok()) return started;
  if (absl::Status led = leader->AwaitLeadership(kWait); !led.ok()) return led;
  const uint64_t epoch = *leader->LeaderEpoch();
  const std::string value(value_bytes, 'v');
  std::vector<double> puts, decisions, gets;
  int64_t wrong = 0;
  for (int i = 0; i < txns; ++i) {
    const std::string key = absl::StrCat("models/m", i % 8);
    absl::Time start = absl::Now();
    absl::Status put = leader->Put(key, value, {epoch, true},
                                   Coordinator::PutMode::kOverwrite);
    puts.push_back(Micros(absl::Now() - start));
    if (!put.ok()) return put;
    start = absl::Now();
    absl::Status decided = server::RecordCommitDecision(
        *leader, absl::StrCat("s", i), value, epoch);
    decisions.push_back(Micros(absl::Now() - start));
    if (!decided.ok()) return decided;
    start = absl::Now();
    absl::StatusOr<std::optional<std::string>> got = leader->Get(key);
    gets.push_back(Micros(absl::Now() - start));
    if (!got.ok()) return got.status();
    if (!got->has_value() || **got != value) ++wrong;
  }
  PrintRow("txn", "put", value_bytes, puts, 0);
  PrintRow("txn", "decide", value_bytes, decisions, 0);
  PrintRow("range", "get", value_bytes, gets, wrong);
  leader->Stop();
  return absl::OkStatus();
}

// Two candidates per trial; the first leads, then resigns (`silent` false)
// or stops renewing (`silent` true); the time until the second leads.
absl::Status TimeHandOvers(tests::EtcdCluster& etcd, int trials, bool silent) {
  std::vector<double> samples;
  int64_t wrong = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const std::string cluster =
        absl::StrCat("bench-", silent ? "expiry-" : "resign-", trial);
    // etcd's smallest lease (2 s) with the tests' margin: an expiry is
    // then TTL + etcd's expiry check (every 500 ms) + the watch.
    std::unique_ptr<EtcdCoordinator> first =
        tests::MakeCoordinator(0, etcd.client_addresses(), cluster);
    if (absl::Status started = first->Start(); !started.ok()) return started;
    if (absl::Status led = first->AwaitLeadership(kWait); !led.ok()) {
      return led;
    }
    std::unique_ptr<EtcdCoordinator> second =
        tests::MakeCoordinator(1, etcd.client_addresses(), cluster);
    if (absl::Status started = second->Start(); !started.ok()) {
      return started;
    }
    // The second is a candidate once it is a member (one transaction).
    while (true) {
      absl::StatusOr<std::vector<Coordinator::Member>> members =
          second->Members();
      if (members.ok() && members->size() == 2) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    const uint64_t epoch = *first->LeaderEpoch();
    const absl::Time start = absl::Now();
    if (silent) {
      first->PauseKeepalivesForTesting(true);
    } else {
      first->Stop();
    }
    if (absl::Status led = second->AwaitLeadership(kWait); !led.ok()) {
      return led;
    }
    samples.push_back(Micros(absl::Now() - start));
    if (*second->LeaderEpoch() <= epoch) ++wrong;
    second->Stop();
    first->Stop();
  }
  PrintRow("election", silent ? "expiry" : "resign", 0, samples, wrong);
  return absl::OkStatus();
}

int Run() {
  tests::EtcdCluster::Options options;
  options.members = absl::GetFlag(FLAGS_members);
  options.log_dir = "/tmp";
  absl::StatusOr<std::unique_ptr<tests::EtcdCluster>> etcd =
      tests::EtcdCluster::Start(options);
  if (!etcd.ok()) {
    std::fprintf(stderr, "%s\n", etcd.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "# coordinator_bench: etcd 3.4 (/usr/bin/etcd), %d member(s) on "
      "loopback; p50/p99 of each call or hand-over\n",
      options.members);
  std::printf("%s\n", LatencyHeader("coordinator").c_str());
  for (absl::Status status :
       {TimeCalls(**etcd, absl::GetFlag(FLAGS_txns),
                  absl::GetFlag(FLAGS_value_bytes)),
        TimeHandOvers(**etcd, absl::GetFlag(FLAGS_trials), false),
        TimeHandOvers(**etcd, absl::GetFlag(FLAGS_trials), true)}) {
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return summon::bench::Run();
}
