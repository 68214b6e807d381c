#include "tests/faults/fault_harness.h"

#include <signal.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/cluster/cluster_calls.h"

namespace summon::tests {
namespace {

// Three units split unevenly over 6 ranks, a tied alias, gradients on every
// rank.
constexpr char kLayout[] =
    R"({"strategy": "FULL_SHARD", "use_orig_params": true,
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [11, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"},
      {"fqn": "norm.w", "shape": [7], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [5, 5], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [3, 9], "dtype": "float32"}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";
// What Edit writes: a parameter of every unit and gradients of two units,
// together covering every rank.
const char* const kEditedParams[] = {"embed.w", "layers.0.attn.w",
                                     "layers.1.w"};
const char* const kEditedGrads[] = {"embed.w", "layers.0.mlp.w"};

constexpr absl::Duration kServingTimeout = absl::Seconds(20);
constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
constexpr size_t kCellChars = 96;

// Where each (rank, unit) of `observed` stands: holding the expected
// values, the values from before, or neither. Shards that the two agree on
// tell nothing and are left out.
std::map<std::string, std::vector<std::string>> Classify(
    const ChecksumMap& observed, const ChecksumMap& expected,
    const ChecksumMap& before) {
  std::map<std::string, std::vector<std::string>> where;
  for (const auto& [key, sum] : expected) {
    auto old = before.find(key);
    if (old != before.end() && old->second == sum) continue;
    auto it = observed.find(key);
    const std::string name =
        absl::StrCat("rank ", key.first, " '", key.second, "'");
    if (it == observed.end()) {
      where["missing"].push_back(name);
    } else if (it->second == sum) {
      where["expected"].push_back(name);
    } else if (old != before.end() && old->second == it->second) {
      where["as before"].push_back(name);
    } else {
      where["neither"].push_back(name);
    }
  }
  return where;
}

}  // namespace

void FaultHarnessTest::StartCluster(std::map<int, std::string> fault_points,
                                    absl::Duration heartbeat) {
  StopCluster();
  FaultCluster::Options options;
  options.heartbeat = heartbeat;
  options.log_prefix =
      testing::UnitTest::GetInstance()->current_test_info()->name();
  for (const auto& [armed, point] : fault_points) {
    absl::StrAppend(&options.log_prefix, "-node", armed, "-", point);
  }
  absl::StrAppend(&options.log_prefix, ".");
  options.fault_points = std::move(fault_points);
  absl::StatusOr<std::unique_ptr<FaultCluster>> started =
      FaultCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  cluster_ = *std::move(started);
  model_ =
      CreateSeeded(node(kLeader), kModel, kLayout,
                   v1::SHARDING_STRATEGY_FULL_SHARD, std::vector<int32_t>{});
  ASSERT_EQ(model_.world_size(), cluster_->world_size());
  known_ = {SeededModel(model_), SeededGrads(model_)};
  ASSERT_TRUE(ShardsIntact("before the scenario"));
}

void FaultHarnessTest::StopCluster() {
  if (cluster_ == nullptr) return;
  const absl::Status alive = cluster_->CheckAlive();
  EXPECT_TRUE(alive.ok()) << "a daemon nobody killed ended: " << alive;
  const absl::Status stopped = cluster_->Stop();
  EXPECT_TRUE(stopped.ok()) << "stopping the cluster: " << stopped;
  cluster_.reset();
}

void FaultHarnessTest::TearDown() { StopCluster(); }

absl::Duration FaultHarnessTest::DetectBound() {
  return cluster_->failure_timeout() + cluster_->options().collective_timeout +
         absl::Seconds(1);
}

void FaultHarnessTest::ExpectDiedAtFaultPoint(int node) {
  absl::StatusOr<ExitStatus> exited =
      cluster_->WaitExit(node, absl::Seconds(10));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_EQ(exited->signal, SIGKILL)
      << "node " << node << " " << ExitStatusText(*exited);
}

absl::Duration FaultHarnessTest::Restart(int node) {
  const absl::Time started = absl::Now();
  EXPECT_TRUE(cluster_->StartNode(node).ok());
  const absl::Status serving = cluster_->WaitServing(kServingTimeout);
  EXPECT_TRUE(serving.ok())
      << "after restarting node " << node << ": " << serving;
  WaitUsable();
  return absl::Now() - started;
}

absl::Duration FaultHarnessTest::WaitUsable() {
  const absl::Time started = absl::Now();
  absl::Status status;
  while (!(status = node(kLeader).ModelChecksum(kModel).status()).ok() &&
         absl::Now() - started < kServingTimeout) {
    absl::SleepFor(kPollInterval);
  }
  EXPECT_TRUE(status.ok()) << "the leader still cannot reach every node: "
                           << status;
  return absl::Now() - started;
}

v1::Session FaultHarnessTest::OpenWritable(int via) {
  v1::SessionOptions options;
  options.set_with_grads(true);
  return OpenOk(node(via), kModel, options);
}

ModelValues FaultHarnessTest::Edit(int via, const std::string& session,
                                   uint64_t seed) {
  ModelValues after = known_;
  for (const char* fqn : kEditedParams) {
    const int64_t numel =
        static_cast<int64_t>(after.params.at(fqn).size() / sizeof(float));
    after.params[fqn] = FloatBytes(SeededFloats(fqn, numel, seed));
    WriteOk(node(via), session, fqn, after.params[fqn]);
  }
  for (const char* fqn : kEditedGrads) {
    const int64_t numel =
        static_cast<int64_t>(after.grads.at(fqn).size() / sizeof(float));
    after.grads[fqn] =
        FloatBytes(SeededFloats(absl::StrCat(fqn, ".grad"), numel, seed));
    WriteOk(node(via), session, fqn, after.grads[fqn], v1::DTYPE_FLOAT32,
            /*grad=*/true);
  }
  return after;
}

bool FaultHarnessTest::ShardsHold(const ModelValues& expected,
                                  const ModelValues& before,
                                  const std::string& what) {
  absl::StatusOr<v1::ModelChecksumResponse> sums =
      node(kLeader).ModelChecksum(kModel);
  if (!sums.ok()) {
    ADD_FAILURE() << "ModelChecksum " << what << ": " << sums.status();
    return false;
  }
  bool held = true;
  for (const bool grads : {false, true}) {
    const ChecksumMap observed =
        grads ? GradChecksums(*sums) : ParamChecksums(*sums);
    const ChecksumMap want =
        ExpectedChecksums(model_, grads ? expected.grads : expected.params);
    if (observed == want) continue;
    held = false;
    const ChecksumMap old =
        ExpectedChecksums(model_, grads ? before.grads : before.params);
    std::vector<std::string> lines;
    for (const auto& [where, shards] : Classify(observed, want, old)) {
      lines.push_back(absl::StrCat(where, ": ", absl::StrJoin(shards, ", ")));
    }
    ADD_FAILURE() << (grads ? "grad" : "param") << " shards " << what
                  << " do not all hold the expected values:\n  "
                  << absl::StrJoin(lines, "\n  ");
  }
  return held;
}

void FaultHarnessTest::ExpectNamesNode(const absl::Status& status, int node,
                                       const std::string& what) {
  EXPECT_TRUE(absl::IsUnavailable(status) || absl::IsAborted(status))
      << what << ": " << status;
  const std::string message(status.message());
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat("node ", node)) ||
              absl::StrContains(message, cluster_->address(node)))
      << what << " does not name node " << node << ": " << status;
}

Detection FaultHarnessTest::PollUntilFailure(
    const std::function<absl::Status()>& call, absl::Time since,
    absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    absl::Status status = call();
    if (!status.ok()) return {status, absl::Now() - since};
    if (absl::Now() > give_up) {
      ADD_FAILURE() << "calls still succeed "
                    << absl::FormatDuration(absl::Now() - since)
                    << " after the fault";
      return {absl::OkStatus(), absl::Now() - since};
    }
    absl::SleepFor(kPollInterval);
  }
}

std::string FaultHarnessTest::Brief(const absl::Status& status) {
  std::string text = status.ok()
                         ? "OK"
                         : absl::StrCat(absl::StatusCodeToString(status.code()),
                                        ": ", status.message());
  if (text.size() > kCellChars) text = text.substr(0, kCellChars - 3) + "...";
  return text;
}

}  // namespace summon::tests
