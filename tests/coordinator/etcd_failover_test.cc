// summond clusters on etcd (issue 31, phase 1): three real summond
// processes with --coordinator etcd://..., a real etcd from Debian's
// /usr/bin/etcd, Gloo between the nodes through the rendezvous records in
// etcd. The node etcd elects leads (not node 0 by rank), every node agrees
// on it and on the epoch; after the leader's summond is killed (SIGKILL) and
// started again, another node leads under a higher epoch, serves an open and
// a read with the bytes a writeback left before the kill, the old leader's
// new process follows, a survivor refuses the deposed epoch, and a session
// the old leader held answers "ended: leader lost" through every node. A
// leader paused past its lease (SIGSTOP) is replaced the same way (the
// survivors form without it and refuse its FULL_SHARD model naming it) and,
// woken, joins as a follower without changing a byte.

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "summon/v1/peer.grpc.pb.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/coordinator/etcd_cluster.h"
#include "tests/coordinator/failover_trial.h"
#include "tests/coordinator/history.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

constexpr char kParam[] = "layers.0.attn.w";
constexpr uint64_t kEditSeed = 23;

class EtcdFailoverTest : public testing::Test {
 protected:
  // Every daemon's SUMMON_FAULT_POINT; none here.
  virtual std::string FaultPointOfEveryNode() const { return ""; }
  // What a test's cluster needs beyond ThreeNodesOnEtcd.
  virtual void Configure(LocalCluster::Options& /*options*/) const {}

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(EtcdCluster::Options{});
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    LocalCluster::Options options =
        ThreeNodesOnEtcd(etcd_->client_address(0), "failover");
    options.fault_point = FaultPointOfEveryNode();
    Configure(options);
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      const absl::Status stopped = cluster_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
    cluster_.reset();
    etcd_.reset();
  }

  // A model written back through a follower: `kParam` holds the edit.
  std::string WriteEdit(int via) {
    const v1::Model model =
        CreateSeeded(cluster_->client(via), "m", kUnevenLayout,
                     v1::SHARDING_STRATEGY_FULL_SHARD);
    const std::string edited = SeededModel(model, kEditSeed).at(kParam);
    const v1::Session session =
        OpenOk(cluster_->client(via), "m", ParamScope({kParam}));
    WriteOk(cluster_->client(via), session.id(), kParam, edited);
    CloseOk(cluster_->client(via), session.id());
    return edited;
  }

  // A survivor's refusal of a Peer operation from the deposed epoch.
  void ExpectDeposedEpochRefused(int node, uint64_t deposed, uint64_t now) {
    auto peer = v1::Peer::NewStub(grpc::CreateChannel(
        cluster_->address(node), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::NodeAbortRequest request;
    request.set_epoch(deposed);
    v1::NodeAbortResponse response;
    const grpc::Status status = peer->NodeAbort(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(),
              absl::StrCat("node ", node,
                           " is fenced: the operation is from cluster epoch ",
                           absl::Hex(deposed), ", the node is in epoch ",
                           absl::Hex(now)));
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(EtcdFailoverTest, AKilledLeaderIsReplacedAndItsWritebackServes) {
  absl::StatusOr<v1::ClusterStatus> first = AgreedLeadership(*cluster_);
  ASSERT_TRUE(first.ok()) << first.status();
  // The epoch is etcd's revision of the leader's epoch record.
  EXPECT_GT(first->epoch(), 0u);
  const int via = (first->leader() + 1) % cluster_->nodes();
  const std::string edited = WriteEdit(via);
  // A session open when the leader dies: it lived in the leader's memory.
  v1::SessionOptions read_only = ParamScope({kParam});
  read_only.set_writeback(false);
  const v1::Session lost = OpenOk(cluster_->client(via), "m", read_only);

  absl::StatusOr<FailoverResult> failover =
      KillLeaderUntilServed(*cluster_, "m", kParam, edited, absl::Seconds(40));
  ASSERT_TRUE(failover.ok()) << failover.status();
  const int old_leader = failover->before.leader();
  const int new_leader = failover->after.leader();
  std::cout << "failover: node " << old_leader << " (epoch "
            << failover->before.epoch() << ") -> node " << new_leader
            << " (epoch " << failover->after.epoch() << ") serving again after "
            << absl::FormatDuration(failover->serving_again) << "\n";
  // Its returning process follows: its election key is younger than the
  // survivors'.
  EXPECT_NE(new_leader, old_leader);
  EXPECT_GT(failover->after.epoch(), failover->before.epoch());
  for (int node = 0; node < cluster_->nodes(); ++node) {
    if (node == new_leader) continue;
    ExpectDeposedEpochRefused(node, failover->before.epoch(),
                              failover->after.epoch());
  }
  // The old leader's session, named through any node: ended, and why.
  for (int node = 0; node < cluster_->nodes(); ++node) {
    EXPECT_EQ(cluster_->client(node).GetSession(lost.id()).status(),
              absl::FailedPreconditionError(absl::StrCat(
                  "session ", lost.id(),
                  " ended: leader lost (it was opened in cluster epoch ",
                  absl::Hex(failover->before.epoch()),
                  " by an earlier leader, and sessions live in their leader's "
                  "memory; the cluster is in epoch ",
                  absl::Hex(failover->after.epoch()), " now: open it again)")))
        << "through node " << node;
  }
  // Every node's shards hold the edit: read through the returned node too.
  const v1::Session session =
      OpenOk(cluster_->client(old_leader), "m", ParamScope({kParam}));
  EXPECT_EQ(ReadOk(cluster_->client(old_leader), session.id(), kParam), edited);
  CloseOk(cluster_->client(old_leader), session.id());
}

TEST_F(EtcdFailoverTest, APausedLeaderIsReplacedAndFollowsWhenItWakes) {
  absl::StatusOr<v1::ClusterStatus> first = AgreedLeadership(*cluster_);
  ASSERT_TRUE(first.ok()) << first.status();
  const int paused = first->leader();
  const int via = (paused + 1) % cluster_->nodes();
  const std::string edited = WriteEdit(via);
  const v1::ModelChecksumResponse before =
      ChecksumOk(cluster_->client(via), "m");

  ASSERT_TRUE(cluster_->Signal(paused, SIGSTOP).ok());
  // Past the 2 s lease and etcd's expiry scan: another node is elected
  // while the old leader sleeps, and the survivors form without it. The
  // client sends a read-only open again while a survivor answers
  // "electing a leader"; once they formed, the FULL_SHARD model (a shard
  // only the paused node holds) is refused at once, naming the node.
  absl::SleepFor(absl::Seconds(5));
  v1::SessionOptions whole = ModuleScope("");
  whole.set_writeback(false);
  const absl::StatusOr<v1::Session> refused =
      cluster_->client(via).OpenSession("m", whole);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find(
                absl::StrCat("needs rank ", paused, " on node ", paused,
                             ", which is not in the cluster")),
            std::string::npos)
      << refused.status();
  ASSERT_TRUE(cluster_->Signal(paused, SIGCONT).ok());
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(40));
  ASSERT_TRUE(after.ok()) << after.status();
  v1::SessionOptions read_only = ParamScope({kParam});
  read_only.set_writeback(false);
  const v1::Session opened = OpenOk(cluster_->client(via), "m", read_only);
  EXPECT_EQ(ReadOk(cluster_->client(via), opened.id(), kParam), edited);
  CloseOk(cluster_->client(via), opened.id());
  EXPECT_NE(after->leader(), paused);
  EXPECT_GT(after->epoch(), first->epoch());
  ExpectDeposedEpochRefused(paused, first->epoch(), after->epoch());
  // Not a byte changed, and the woken node serves the edit as a follower.
  const v1::ModelChecksumResponse now =
      ChecksumOk(cluster_->client(paused), "m");
  EXPECT_EQ(ParamChecksums(now), ParamChecksums(before));
  const v1::Session session =
      OpenOk(cluster_->client(paused), "m", ParamScope({kParam}));
  EXPECT_EQ(ReadOk(cluster_->client(paused), session.id(), kParam), edited);
  CloseOk(cluster_->client(paused), session.id());
}

// The leader dies (SIGKILL at fault point commit.decided) after recording a
// writeback's COMMIT decision in etcd and before sending COMMIT to any node:
// the next leader finds the decision in etcd and completes the writeback on
// every rank.
// A follower killed and started again: the same leader forms the cluster
// again under a new epoch it writes to etcd (no two formations share one),
// which the followers check against etcd before they join it.
TEST_F(EtcdFailoverTest, AReturningFollowerJoinsANewEpochOfTheSameLeader) {
  absl::StatusOr<v1::ClusterStatus> first = AgreedLeadership(*cluster_);
  ASSERT_TRUE(first.ok()) << first.status();
  const int follower = (first->leader() + 1) % cluster_->nodes();
  const std::string edited = WriteEdit(follower);
  ASSERT_TRUE(cluster_->Kill(follower).ok());
  ASSERT_TRUE(cluster_->StartNode(follower).ok());
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(30));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->leader(), first->leader());
  EXPECT_GT(after->epoch(), first->epoch());
  ExpectDeposedEpochRefused(follower, first->epoch(), after->epoch());
  const v1::Session session =
      OpenOk(cluster_->client(follower), "m", ParamScope({kParam}));
  EXPECT_EQ(ReadOk(cluster_->client(follower), session.id(), kParam), edited);
  CloseOk(cluster_->client(follower), session.id());
}

// A model operation's leader paused past its lease (SIGSTOP at fault point
// model.before_apply, armed on the leader alone) before it changed
// anything: another node leads meanwhile, and the woken node's load fails
// without changing a byte, on its own ranks or on any other.
// A leader paused inside a model load past its lease, then woken. The
// parameter names a fence broken on purpose (SUMMON_BROKEN_FENCE, "" none):
// the history of the test's writes, the load and the reads through every
// node afterwards goes to the fault scenarios' checker
// (tests/coordinator/history.h), which must pass with the fences and fail
// without the leader's lease check: then the woken node loads the
// checkpoint into its own rank while the followers refuse its epoch, and a
// read through any node mixes the two.
class EtcdPausedModelOpTest : public EtcdFailoverTest,
                              public testing::WithParamInterface<std::string> {
 protected:
  void Configure(LocalCluster::Options& options) const override {
    options.fault_files = true;
    options.broken_fence = GetParam();
    // Every node reads the checkpoint's files at the same path.
    const char* tmp = std::getenv("TEST_TMPDIR");
    options.checkpoint_root = absl::StrCat(
        tmp == nullptr ? "/tmp" : tmp, "/paused-model-op-checkpoints-",
        GetParam().empty() ? "fenced" : "broken");
    std::filesystem::create_directories(options.checkpoint_root);
  }

  // Every tensor of unit layers.0, which spans every rank (kParam alone
  // lies on ranks 0 and 1 only: a load on node 2 would not show in it).
  static std::vector<std::string> Unit() {
    return {"layers.0.attn.b", "layers.0.attn.w", "layers.0.mlp.w"};
  }

  // Writes seed `seed`'s values into every tensor of the unit through
  // `node`, one writeback.
  void WriteUnit(int node, const v1::Model& model, uint64_t seed) {
    const client::SummonClient& client = cluster_->client(node);
    const TensorBytes values = SeededModel(model, seed);
    const v1::Session session = OpenOk(client, "m", ParamScope(Unit()));
    for (const std::string& fqn : Unit()) {
      WriteOk(client, session.id(), fqn, values.at(fqn));
    }
    CloseOk(client, session.id());
  }

  // A write of seed `seed`'s values into the unit, as the checker sees it.
  static Op WriteOp(int id, absl::Time start, const v1::Model& model,
                    uint64_t seed, Outcome outcome, uint64_t epoch) {
    Op op;
    op.kind = OpKind::kWrite;
    op.worker = id;
    op.start = start;
    op.end = absl::Now();
    op.outcome = outcome;
    op.epoch = epoch;
    op.unit = "layers.0";
    op.seed = seed;
    const TensorBytes values = SeededModel(model, seed);
    for (const std::string& fqn : Unit()) {
      op.checksums[fqn] = BytesChecksum(values.at(fqn));
    }
    return op;
  }
};

TEST_P(EtcdPausedModelOpTest, TheCheckerCatchesAWokenLeadersLoadUnlessFenced) {
  absl::StatusOr<v1::ClusterStatus> first = AgreedLeadership(*cluster_);
  ASSERT_TRUE(first.ok()) << first.status();
  const int paused = first->leader();
  const int via = (paused + 1) % cluster_->nodes();
  const client::SummonClient& client = cluster_->client(via);
  const v1::Model model = CreateSeeded(client, "m", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  History history;
  absl::Time start = absl::Now();
  WriteUnit(via, model, kEditSeed);
  history.Record(
      WriteOp(1, start, model, kEditSeed, Outcome::kOk, first->epoch()));
  const absl::Status saved = client.SaveModel("m", "m.safetensors").status();
  ASSERT_TRUE(saved.ok()) << saved;
  // Written after the save: the load would bring the first write back.
  start = absl::Now();
  WriteUnit(via, model, kEditSeed + 1);
  history.Record(
      WriteOp(2, start, model, kEditSeed + 1, Outcome::kOk, first->epoch()));
  const v1::ModelChecksumResponse before = ChecksumOk(client, "m");
  // The leader's reaper clears the writebacks' commit decisions from etcd
  // (every 200 ms); one left there would be applied again where the woken
  // node rejoins.
  absl::SleepFor(absl::Seconds(1));

  std::ofstream(cluster_->fault_file(paused)) << "model.before_apply stop\n";
  start = absl::Now();
  absl::Status loaded;
  std::thread loader(
      [&] { loaded = client.LoadModel("m", "m.safetensors").status(); });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (std::filesystem::exists(cluster_->fault_file(paused)) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  // Past the 2 s lease and etcd's expiry scan, as above.
  absl::SleepFor(absl::Seconds(5));
  ASSERT_TRUE(cluster_->Signal(paused, SIGCONT).ok());
  loader.join();
  EXPECT_FALSE(loaded.ok());
  Op load =
      WriteOp(3, start, model, kEditSeed,
              loaded.ok() ? Outcome::kOk : Outcome::kFailed, first->epoch());
  load.error = std::string(loaded.message());
  history.Record(load);
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(40));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->leader(), paused);

  CheckInput input;
  input.ops = history.ops();
  const TensorBytes initial = SeededModel(model);
  for (const std::string& fqn : Unit()) {
    input.unit_of[fqn] = "layers.0";
    input.initial[fqn] = BytesChecksum(initial.at(fqn));
  }
  for (int node = 0; node < cluster_->nodes(); ++node) {
    const client::SummonClient& reader = cluster_->client(node);
    const v1::Session read = OpenOk(reader, "m", ParamScope(Unit()));
    for (const std::string& fqn : Unit()) {
      input.final_reads[node][fqn] =
          BytesChecksum(ReadOk(reader, read.id(), fqn));
    }
    CloseOk(reader, read.id());
  }
  const CheckResult result = CheckHistory(input);
  std::cout << "fence broken: '" << GetParam() << "': the load answered "
            << loaded << "; " << result.Summary() << "\n";
  if (GetParam().empty()) {
    EXPECT_EQ(result.violation_count, 0) << result.Summary();
    for (int node = 0; node < cluster_->nodes(); ++node) {
      EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(node), "m")),
                ParamChecksums(before))
          << "through node " << node;
    }
  } else {
    // The woken node's rank holds the first write again, the others the
    // second: every node's read of the unit is a mix, values nobody wrote.
    ASSERT_EQ(result.violations.size(), static_cast<size_t>(cluster_->nodes()))
        << result.Summary();
    for (int node = 0; node < cluster_->nodes(); ++node) {
      EXPECT_THAT(
          result.violations[node],
          testing::StartsWith(absl::StrCat("phantom read: end state via node ",
                                           node, " read layers.0.")));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fences, EtcdPausedModelOpTest,
                         testing::Values("", "model.lease"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("Fenced")
                                                     : std::string("Broken");
                         });

// Only the leader decides writebacks, so only the leader reaches the point.
class EtcdDecidedFailoverTest : public EtcdFailoverTest {
 protected:
  std::string FaultPointOfEveryNode() const override {
    return "commit.decided";
  }
};

TEST_F(EtcdDecidedFailoverTest, AWritebackDecidedBeforeTheLeaderDiedCompletes) {
  absl::StatusOr<v1::ClusterStatus> first = AgreedLeadership(*cluster_);
  ASSERT_TRUE(first.ok()) << first.status();
  const int leader = first->leader();
  const int via = (leader + 1) % cluster_->nodes();
  const v1::Model model =
      CreateSeeded(cluster_->client(via), "m", kUnevenLayout,
                   v1::SHARDING_STRATEGY_FULL_SHARD);
  TensorBytes expected = SeededModel(model);
  expected[kParam] = SeededModel(model, kEditSeed).at(kParam);
  const v1::Session session =
      OpenOk(cluster_->client(via), "m", ParamScope({kParam}));
  WriteOk(cluster_->client(via), session.id(), kParam, expected.at(kParam));
  // The leader kills itself once the decision is in etcd: the close fails.
  EXPECT_FALSE(cluster_->client(via).CloseSession(session.id()).ok());
  ASSERT_TRUE(cluster_->Kill(leader).ok());  // Reaps it.
  ASSERT_TRUE(cluster_->StartNode(leader).ok());
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(30));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->leader(), leader);
  // Every rank holds the edit (checksums computed from the layout), and a
  // read through the returned node answers it.
  EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(leader), "m")),
            ExpectedChecksums(model, expected));
  const v1::Session read =
      OpenOk(cluster_->client(leader), "m", ParamScope({kParam}));
  EXPECT_EQ(ReadOk(cluster_->client(leader), read.id(), kParam),
            expected.at(kParam));
  CloseOk(cluster_->client(leader), read.id());
}

}  // namespace
}  // namespace summon::tests
