// Checker-based fault scenarios (issue 31, "Tests"): real summond processes
// in two shapes, 3 nodes x 1 rank and 2 nodes x 2 ranks (a lost node takes
// half the ranks and leaves the leader alone), on a real 3-member etcd,
// under a concurrent workload
// of readers, writers with writeback and a trainer stepping on every node
// (tests/coordinator/workload.h), each scenario injecting one fault in the
// middle: the leader or a follower killed (SIGKILL) or paused (SIGSTOP,
// SIGCONT after twice its lease) at a fault point (during a gather, between
// PREPARE and COMMIT, at the commit decision, during COMMIT) or idle, one
// or two of etcd's three members killed, the leader cut off from etcd. A
// killed node is started again at once, as a supervisor would. Once the
// cluster agrees on a leader again and served some more, the workload
// stops, every tensor is read through every node and each node's per-rank
// checksums are compared with those the values read imply; the checker
// (tests/coordinator/history.h) then judges the whole history. Each
// scenario prints its summary (ops, acknowledged, failed, unknown, the
// longest gap without a successful operation).

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/coordinator/etcd_cluster.h"
#include "tests/coordinator/failover_trial.h"
#include "tests/coordinator/history.h"
#include "tests/coordinator/workload.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

// Short, so that a scenario is short; 3 s rather than 2 s because on two
// busy cores a leader starved for a second must not lose its validity (the
// 1 s margin) outside the fault under test.
constexpr absl::Duration kLeaseTtl = absl::Seconds(3);
// A pause or a partition lasts this long: past twice the lease and etcd's
// expiry scan, so another node is elected meanwhile.
const absl::Duration kOutage = absl::Seconds(8);
constexpr int kMinOps = 200;
// Successful operations before the fault; reads served and writebacks
// acknowledged after the recovery (serving again means both).
constexpr int kWarmUpOps = 50;
constexpr int kReadsAfter = 10;
constexpr int kWritesAfter = 3;

enum class Fault { kKill, kStop, kEtcdMembers, kPartition };

struct Scenario {
  const char* name;
  Fault fault;
  bool leader = true;      // The leader, else a follower (kKill, kStop).
  const char* point = "";  // A fault point, "" idle (kKill, kStop).
  int etcd_killed = 0;     // kEtcdMembers.
  // Set: the scenario fails on main for this reason and is DISABLED_ until
  // that is fixed (run it with --gtest_also_run_disabled_tests).
  const char* known_failure = nullptr;
};

void PrintTo(const Scenario& scenario, std::ostream* out) {
  *out << scenario.name;
}

// The cluster's shape: summond processes x local ranks each.
struct Topology {
  int nodes;
  int local_ranks;
};

void PrintTo(const Topology& topology, std::ostream* out) {
  *out << topology.nodes << "x" << topology.local_ranks;
}

class FaultScenarioTest
    : public testing::TestWithParam<std::tuple<Scenario, Topology>> {
 protected:
  const Scenario& scenario() const { return std::get<0>(GetParam()); }
  const Topology& topology() const { return std::get<1>(GetParam()); }

  void SetUp() override {
    EtcdCluster::Options etcd_options;
    etcd_options.members = 3;
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(etcd_options);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    LocalCluster::Options options;
    options.nodes = topology().nodes;
    options.local_ranks = topology().local_ranks;
    options.collective_timeout = absl::Seconds(5);
    options.call_timeout = absl::Seconds(10);
    options.coordinator_lease_ttl = kLeaseTtl;
    options.fault_files = true;
    options.coordinator = absl::StrCat(
        "etcd://", absl::StrJoin(etcd_->client_addresses(), ","), "/scenarios");
    if (scenario().fault == Fault::kPartition) {
      // Node N reaches etcd only through member N's proxy: cutting it cuts
      // that node off and no other.
      for (int node = 0; node < options.nodes; ++node) {
        absl::StatusOr<TcpProxy*> proxy = etcd_->Proxy(node);
        ASSERT_TRUE(proxy.ok()) << proxy.status();
        options.node_coordinators.push_back(
            absl::StrCat("etcd://", (*proxy)->address(), "/scenarios"));
      }
    }
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }

  void TearDown() override {
    if (cluster_ != nullptr) {
      // Sessions whose close failed (and whose abort failed too) would
      // refuse the model's delete in Stop() until their lease ends.
      absl::StatusOr<v1::ListSessionsResponse> open =
          cluster_->client(0).ListSessions("m", /*all=*/true);
      if (open.ok()) {
        for (const v1::Session& session : open->sessions()) {
          cluster_->client(0)
              .CloseSession(session.id(), /*abort=*/true)
              .IgnoreError();
        }
      }
      const absl::Status stopped = cluster_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
    cluster_.reset();
    etcd_.reset();
  }

  // Arms `point` on `node` and waits until the workload brings the node
  // there ("kill" or "stop").
  absl::Status FireAt(int node, const std::string& point,
                      const std::string& action) {
    const std::string file = cluster_->fault_file(node);
    std::ofstream(file) << point << " " << action << "\n";
    const absl::Time give_up = absl::Now() + absl::Seconds(40);
    while (std::filesystem::exists(file)) {
      if (absl::Now() > give_up) {
        std::filesystem::remove(file);
        return absl::DeadlineExceededError(
            absl::StrCat("node ", node, " never reached ", point));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::OkStatus();
  }

  absl::Status Inject(const Scenario& scenario, int leader) {
    const int target =
        scenario.leader ? leader : (leader + 1) % cluster_->nodes();
    const bool at_point = !std::string(scenario.point).empty();
    switch (scenario.fault) {
      case Fault::kKill:
        if (at_point) {
          if (absl::Status fired = FireAt(target, scenario.point, "kill");
              !fired.ok()) {
            return fired;
          }
        }
        if (absl::Status killed = cluster_->Kill(target); !killed.ok()) {
          return killed;
        }
        return cluster_->StartNode(target);
      case Fault::kStop:
        if (at_point) {
          if (absl::Status fired = FireAt(target, scenario.point, "stop");
              !fired.ok()) {
            return fired;
          }
        } else if (absl::Status stopped = cluster_->Signal(target, SIGSTOP);
                   !stopped.ok()) {
          return stopped;
        }
        absl::SleepFor(kOutage);
        return cluster_->Signal(target, SIGCONT);
      case Fault::kEtcdMembers:
        for (int member = 0; member < scenario.etcd_killed; ++member) {
          if (absl::Status killed = etcd_->Kill(member); !killed.ok()) {
            return killed;
          }
        }
        absl::SleepFor(kOutage);
        for (int member = 0; member < scenario.etcd_killed; ++member) {
          if (absl::Status back = etcd_->Restart(member); !back.ok()) {
            return back;
          }
        }
        return etcd_->WaitHealthy(absl::Seconds(30));
      case Fault::kPartition: {
        absl::StatusOr<TcpProxy*> proxy = etcd_->Proxy(leader);
        if (!proxy.ok()) return proxy.status();
        (*proxy)->Cut();
        absl::SleepFor(kOutage);
        (*proxy)->Restore();
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // Every tensor read through every node, and each node's per-rank
  // checksums against those the values it read imply (a rank left behind
  // by a writeback is half applied there).
  void ReadEnd(const v1::Model& model, absl::Duration patience,
               CheckInput& input, std::vector<std::string>& rank_violations) {
    std::vector<std::string> fqns;
    for (const auto& [fqn, unit] : Workload::UnitOf()) fqns.push_back(fqn);
    for (int via = 0; via < cluster_->nodes(); ++via) {
      client::ClientOptions options;
      options.timeout = absl::Seconds(10);
      client::SummonClient node(cluster_->address(via), options);
      TensorBytes values;
      absl::Status status;
      const absl::Time give_up = absl::Now() + patience;
      do {
        values.clear();
        absl::StatusOr<v1::Session> session =
            node.OpenSession("m", ReadOnly(ParamScope(fqns)));
        status = session.status();
        for (size_t i = 0; status.ok() && i < fqns.size(); ++i) {
          client::ReadTensorParams read;
          read.tensor = {session->id(), fqns[i], false};
          absl::StatusOr<client::TensorData> data = node.ReadTensor(read);
          status = data.status();
          if (data.ok()) values[fqns[i]] = data->data;
        }
        if (session.ok()) node.CloseSession(session->id()).IgnoreError();
        if (!status.ok()) absl::SleepFor(absl::Milliseconds(200));
      } while (!status.ok() && absl::Now() < give_up);
      if (!status.ok()) {
        ADD_FAILURE() << "end state via node " << via << ": " << status;
        continue;
      }
      for (const auto& [fqn, bytes] : values) {
        input.final_reads[via][fqn] = BytesChecksum(bytes);
      }
      const ChecksumMap expected = ExpectedChecksums(model, values);
      const ChecksumMap actual = ParamChecksums(ChecksumOk(node, "m"));
      for (const auto& [rank_unit, checksum] : expected) {
        auto found = actual.find(rank_unit);
        if (found == actual.end() || found->second != checksum) {
          rank_violations.push_back(absl::StrCat(
              "half applied: via node ", via, ", rank ", rank_unit.first,
              " holds other bytes of unit '", rank_unit.second,
              "' than the full tensors read through it"));
        }
      }
    }
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<LocalCluster> cluster_;
};

// Until `done` or `timeout`; false on the timeout.
template <typename Done>
bool WaitUntil(Done done, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

TEST_P(FaultScenarioTest, TheHistoryChecksOut) {
  const Scenario& scenario = this->scenario();
  absl::StatusOr<v1::ClusterStatus> first =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(30));
  ASSERT_TRUE(first.ok()) << first.status();
  const v1::Model model = CreateSeeded(cluster_->client(0), "m", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  ASSERT_FALSE(model.name().empty());

  Workload::Options options;
  for (int node = 0; node < cluster_->nodes(); ++node) {
    options.addresses.push_back(cluster_->address(node));
  }
  options.local_ranks = cluster_->local_ranks();
  options.model = "m";
  options.description = model;
  Workload workload(options);
  workload.Start();
  ASSERT_TRUE(WaitUntil([&] { return workload.succeeded() >= kWarmUpOps; },
                        absl::Seconds(60)))
      << workload.succeeded() << " operations succeeded before the fault";
  const absl::Time fault = absl::Now();
  const absl::Status injected = Inject(scenario, first->leader());
  ASSERT_TRUE(injected.ok()) << injected;
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(60));
  ASSERT_TRUE(after.ok()) << after.status();
  const int reads_before = workload.reads_served();
  const int writes_before = workload.writes_acked();
  const bool served = WaitUntil(
      [&] {
        return workload.recorded() >= kMinOps &&
               workload.reads_served() >= reads_before + kReadsAfter &&
               workload.writes_acked() >= writes_before + kWritesAfter;
      },
      absl::Seconds(60));
  EXPECT_TRUE(served) << "after the recovery, within 60 s: "
                      << workload.reads_served() - reads_before
                      << " reads served, "
                      << workload.writes_acked() - writes_before
                      << " writebacks acknowledged";
  workload.Stop();

  CheckInput input;
  input.ops = workload.history().ops();
  input.unit_of = Workload::UnitOf();
  for (const auto& [fqn, bytes] : SeededModel(model)) {
    input.initial[fqn] = BytesChecksum(bytes);
  }
  std::vector<std::string> rank_violations;
  // A cluster that did not serve again gets a short try only.
  ReadEnd(model, served ? absl::Seconds(20) : absl::Seconds(5), input,
          rank_violations);
  CheckResult result = CheckHistory(input);
  result.violations.insert(result.violations.end(), rank_violations.begin(),
                           rank_violations.end());
  result.violation_count += static_cast<int>(rank_violations.size());
  std::cout << scenario.name << " (" << topology().nodes << "x"
            << topology().local_ranks << "): leader " << first->leader()
            << " (epoch " << first->epoch() << ") -> " << after->leader()
            << " (epoch " << after->epoch() << "), recovered "
            << absl::FormatDuration(absl::Now() - fault) << " after the fault; "
            << result.Summary() << "\n";
  for (const std::string& violation : result.violations) {
    std::cout << "  " << violation << "\n";
  }
  if (scenario.known_failure != nullptr) {
    std::cout << "  known on main: " << scenario.known_failure << "\n";
  }
  EXPECT_GE(result.ops, kMinOps);
  EXPECT_THAT(result.violations, testing::IsEmpty());
}

// A scenario that fails on main names its reason in `known_failure` and is
// DISABLED_ until that is fixed; none does now (the communicator left
// broken after a paused leader resumed or a follower killed in a gather
// came back is re-created by the leader's re-form, Membership::Reform).
const Scenario kScenarios[] = {
    {"KillLeaderInGather", Fault::kKill, true, "gather.before_exchange"},
    {"KillFollowerInGather", Fault::kKill, false, "gather.before_exchange"},
    {"KillLeaderAfterPrepare", Fault::kKill, true, "prepare.after_stage"},
    {"KillFollowerAfterPrepare", Fault::kKill, false, "prepare.after_stage"},
    {"KillLeaderAtDecision", Fault::kKill, true, "commit.decided"},
    {"KillFollowerInCommit", Fault::kKill, false, "commit.before_apply"},
    {"KillLeaderInCommit", Fault::kKill, true, "commit.after_apply"},
    {"KillLeaderIdle", Fault::kKill, true, ""},
    {"KillFollowerIdle", Fault::kKill, false},
    {"StopLeaderInGather", Fault::kStop, true, "gather.before_exchange"},
    {"StopFollowerInGather", Fault::kStop, false, "gather.before_exchange"},
    {"StopLeaderAfterPrepare", Fault::kStop, true, "prepare.after_stage"},
    {"StopFollowerAfterPrepare", Fault::kStop, false, "prepare.after_stage"},
    {"StopLeaderAtDecision", Fault::kStop, true, "commit.decided"},
    {"StopFollowerInCommit", Fault::kStop, false, "commit.before_apply"},
    {"StopLeaderInCommit", Fault::kStop, true, "commit.after_apply"},
    {"StopLeaderIdle", Fault::kStop, true, ""},
    {"StopFollowerIdle", Fault::kStop, false},
    {"EtcdLosesOneMember", Fault::kEtcdMembers, true, "", 1},
    {"EtcdLosesQuorum", Fault::kEtcdMembers, true, "", 2},
    {"LeaderCutOffFromEtcd", Fault::kPartition, true, ""},
};

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultScenarioTest,
    testing::Combine(testing::ValuesIn(kScenarios),
                     testing::Values(Topology{3, 1}, Topology{2, 2})),
    [](const testing::TestParamInfo<std::tuple<Scenario, Topology>>& info) {
      const Scenario& scenario = std::get<0>(info.param);
      const Topology& topology = std::get<1>(info.param);
      return absl::StrCat(scenario.known_failure != nullptr ? "DISABLED_" : "",
                          scenario.name, "_", topology.nodes, "x",
                          topology.local_ranks);
    });

}  // namespace
}  // namespace summon::tests
