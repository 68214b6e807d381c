// Client failures (issue 5, scenario 4): a client SIGKILLed in the middle of
// a read stream and of a write stream (with and without a declared element
// count, directly on the leader and through a follower that forwards), and a
// client that never renews its lease. The daemons must not wait for the dead
// client, a partially received write must not be applied, and an expired
// session is aborted without writeback.

#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/faults/child_process.h"
#include "tests/faults/fault_harness.h"

namespace summon::tests {
namespace {

// One 8 MiB parameter: a stream of 64 KiB chunks is far from done when the
// client is killed, and flow control holds the daemon's side of a read.
constexpr char kBigModel[] = "faults-big";
constexpr char kBigParam[] = "big.w";
constexpr int64_t kBigNumel = 2048 * 1024;
constexpr char kBigLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "", "params": [
    {"fqn": "big.w", "shape": [2048, 1024], "dtype": "float32"}]}]})";
// Lets the daemon receive what the killed client already sent.
constexpr absl::Duration kInFlight = absl::Milliseconds(200);

std::string StreamClientPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "summon",
                      "/tests/faults/stream_client");
}

// Where `actual` first differs from `expected` (whole float32 tensors).
std::string FirstDifference(const std::string& actual,
                            const std::string& expected) {
  if (actual.size() != expected.size()) {
    return absl::StrCat(actual.size(), " bytes instead of ", expected.size());
  }
  const std::vector<float> got = BytesToFloats(actual);
  const std::vector<float> want = BytesToFloats(expected);
  int64_t differ = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && differ++ == 0) first = i;
  }
  if (differ == 0) return "";
  return absl::StrCat(differ, " elements differ, first at ", first, ": ",
                      got[first], " instead of ", want[first]);
}

struct StreamKill {
  std::string scenario;
  int via;
  std::vector<std::string> args;  // After the address.
};

TEST_F(FaultHarnessTest, S4aClientKilledMidStream) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const v1::Model big = CreateSeeded(node(kLeader), kBigModel, kBigLayout,
                                     v1::SHARDING_STRATEGY_FULL_SHARD);
  const std::string seeded = SeededModel(big)[kBigParam];
  const v1::Session session = OpenOk(node(kLeader), kBigModel, {});
  const std::string numel = absl::StrCat(kBigNumel);
  const std::vector<StreamKill> kills = {
      {"4a SIGKILL client mid read stream (via node 1)",
       kSurvivor,
       {"read", session.id(), kBigParam}},
      {"4b SIGKILL client mid write stream (counted, leader)",
       kLeader,
       {"write", session.id(), kBigParam, numel, "counted"}},
      {"4c SIGKILL client mid write stream (uncounted, via node 1)",
       kSurvivor,
       {"write", session.id(), kBigParam, numel, "uncounted"}},
  };
  for (const StreamKill& kill : kills) {
    SCOPED_TRACE(kill.scenario);
    ChildProcess::Spec spec;
    spec.argv = {StreamClientPath(), cluster().address(kill.via)};
    spec.argv.insert(spec.argv.end(), kill.args.begin(), kill.args.end());
    spec.pipe_stdout = true;
    absl::StatusOr<ChildProcess> client = ChildProcess::Spawn(spec);
    ASSERT_TRUE(client.ok()) << client.status();
    const absl::StatusOr<std::string> line =
        client->ReadLine(absl::Seconds(10));
    ASSERT_TRUE(line.ok()) << line.status();
    ASSERT_EQ(*line, "mid-stream");
    absl::SleepFor(kInFlight);
    const absl::StatusOr<ExitStatus> killed = client->Kill();
    ASSERT_TRUE(killed.ok()) << killed.status();
    EXPECT_EQ(killed->signal, SIGKILL) << ExitStatusText(*killed);
    const absl::Time after_kill = absl::Now();

    // The daemons carry on, and no element of a cut write landed in any
    // node's copy.
    bool intact = true;
    for (int reader = 0; reader < cluster().nodes(); ++reader) {
      const std::string difference = FirstDifference(
          ReadOk(node(reader), session.id(), kBigParam), seeded);
      EXPECT_EQ(difference, "") << kBigParam << " via node " << reader;
      intact = intact && difference.empty();
    }
    Report({kill.scenario, "daemons unaffected; a cut write is not applied",
            absl::StrCat("exact reads on every node ",
                         absl::ToInt64Milliseconds(absl::Now() - after_kill),
                         " ms after the kill"),
            intact, std::nullopt, std::nullopt});
  }
  // The writeback of what the session holds leaves every shard as seeded.
  CloseOk(node(kLeader), session.id());
  EXPECT_EQ(ParamChecksums(ChecksumOk(node(kLeader), kBigModel)),
            ExpectedChecksums(big, SeededModel(big)));
  EXPECT_TRUE(node(kLeader).DeleteModel(kBigModel).ok());
}

TEST_F(FaultHarnessTest, S4bLeaseNeverRenewed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  constexpr absl::Duration kLease = absl::Seconds(1);
  // The reaper runs every 200 ms (SessionManager::Options).
  const absl::Duration bound =
      kLease + absl::Milliseconds(200) + absl::Seconds(1);
  v1::SessionOptions options;
  options.set_with_grads(true);
  options.set_lease_seconds(absl::ToInt64Seconds(kLease));
  const absl::Time opened = absl::Now();
  const v1::Session session = OpenOk(node(kVictim), kModel, options);
  const ModelValues edited = Edit(kVictim, session.id(), 401);
  const Detection expired = PollUntilFailure(
      [&] { return node(kVictim).GetSession(session.id()).status(); }, opened,
      bound + absl::Seconds(5));
  // R25: the ended session says its lease expired.
  EXPECT_TRUE(absl::IsFailedPrecondition(expired.status) &&
              absl::StrContains(expired.status.message(), "lease expired"))
      << expired.status;
  EXPECT_GE(expired.after, kLease) << "aborted before its lease ran out";
  EXPECT_LE(expired.after, bound);
  Report({"4d client never renews a 1 s lease",
          "session aborted after ~1 s, no writeback", Brief(expired.status),
          ShardsHold(known(), edited, "after the lease ran out"), expired.after,
          std::nullopt});
}

}  // namespace
}  // namespace summon::tests
