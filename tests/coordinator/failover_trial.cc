#include "tests/coordinator/failover_trial.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/cluster/cluster_values.h"

namespace summon::tests {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(50);

// One open + read + close of `fqn` through `node`: OK only with `expected`.
absl::Status OpenAndRead(const client::SummonClient& node,
                         const std::string& model, const std::string& fqn,
                         const std::string& expected) {
  v1::SessionOptions options = ParamScope({fqn});
  options.set_writeback(false);
  absl::StatusOr<v1::Session> session = node.OpenSession(model, options);
  if (!session.ok()) return session.status();
  client::ReadTensorParams read;
  read.tensor = {session->id(), fqn, false};
  absl::StatusOr<client::TensorData> data = node.ReadTensor(read);
  node.CloseSession(session->id()).IgnoreError();
  if (!data.ok()) return data.status();
  if (data->data != expected) {
    return absl::DataLossError(absl::StrCat(fqn, " read other bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::ClusterStatus> AgreedLeadership(
    const LocalCluster& cluster) {
  std::optional<v1::ClusterStatus> agreed;
  for (int node = 0; node < cluster.nodes(); ++node) {
    absl::StatusOr<v1::ClusterStatus> status =
        cluster.client(node).GetClusterStatus();
    if (!status.ok()) return status.status();
    if (!status->ready()) {
      return absl::UnavailableError(
          absl::StrCat("node ", node, " is not ready: ", status->detail()));
    }
    // One leader, two epochs: a follower that has not yet heard that its
    // leader re-formed (it learns at its next heartbeat), not two leaders.
    if (agreed.has_value() && agreed->leader() == status->leader() &&
        agreed->epoch() != status->epoch()) {
      return absl::UnavailableError(absl::StrCat(
          "node ", node, " is still in epoch ", status->epoch(), ", node ",
          agreed->answered_by(), " in epoch ", agreed->epoch()));
    }
    if (agreed.has_value() && agreed->leader() != status->leader()) {
      return absl::InternalError(
          absl::StrCat("two leaderships at once: node ", agreed->answered_by(),
                       " follows node ", agreed->leader(), " in epoch ",
                       agreed->epoch(), ", node ", node, " follows node ",
                       status->leader(), " in epoch ", status->epoch()));
    }
    agreed = *status;
  }
  return *agreed;
}

absl::StatusOr<v1::ClusterStatus> AwaitAgreedLeadership(
    const LocalCluster& cluster, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::ClusterStatus> agreed = AgreedLeadership(cluster);
    if (agreed.ok() || absl::IsInternal(agreed.status()) ||
        absl::Now() >= give_up) {
      return agreed;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

LocalCluster::Options ThreeNodesOnEtcd(absl::string_view etcd_address,
                                       absl::string_view name) {
  LocalCluster::Options options;
  options.nodes = 3;
  options.local_ranks = 1;
  options.collective_timeout = absl::Seconds(10);
  options.coordinator = absl::StrCat("etcd://", etcd_address, "/", name);
  options.coordinator_lease_ttl = absl::Seconds(2);
  return options;
}

absl::StatusOr<FailoverResult> KillLeaderUntilServed(
    LocalCluster& cluster, const std::string& model, const std::string& fqn,
    const std::string& expected, absl::Duration timeout, AfterKill after) {
  FailoverResult result;
  absl::StatusOr<v1::ClusterStatus> before = AgreedLeadership(cluster);
  if (!before.ok()) return before.status();
  result.before = *before;
  const int killed = before->leader();
  const int survivor = (killed + 1) % cluster.nodes();
  const absl::Time start = absl::Now();
  if (absl::Status status = cluster.Kill(killed); !status.ok()) return status;
  // A supervisor restarts it at once; StartNode returns once every node
  // reports SERVING.
  if (after == AfterKill::kRestart) {
    if (absl::Status status = cluster.StartNode(killed); !status.ok()) {
      return status;
    }
  }
  absl::Status last;
  while (absl::Now() - start < timeout) {
    last = OpenAndRead(cluster.client(survivor), model, fqn, expected);
    if (last.ok()) break;
    if (absl::IsDataLoss(last)) return last;
    absl::SleepFor(kPoll);
  }
  if (!last.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("no open and read through node ", survivor, " within ",
                     absl::FormatDuration(timeout), ": ", last.ToString()));
  }
  result.serving_again = absl::Now() - start;
  if (after == AfterKill::kRestart) {
    absl::StatusOr<v1::ClusterStatus> agreed = AgreedLeadership(cluster);
    if (!agreed.ok()) return agreed.status();
    result.after = *agreed;
    return result;
  }
  absl::StatusOr<v1::ClusterStatus> served =
      cluster.client(survivor).GetClusterStatus();
  if (!served.ok()) return served.status();
  result.after = *served;
  if (absl::Status status = cluster.StartNode(killed); !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::ClusterStatus> rejoined =
      AwaitAgreedLeadership(cluster, timeout);
  if (!rejoined.ok()) return rejoined.status();
  if (rejoined->leader() != served->leader()) {
    return absl::InternalError(absl::StrCat(
        "node ", killed, " came back and the leadership moved from node ",
        served->leader(), " to node ", rejoined->leader()));
  }
  return result;
}

}  // namespace summon::tests
