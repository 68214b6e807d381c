// The fault scenarios' checker on hand-made histories: a correct one passes,
// and each kind of bad history (a lost acknowledgement, a half-applied
// writeback, a phantom read, a generation going back, a stale read, a
// deposed epoch's write applied) fails with the violation naming it.

#include "tests/coordinator/history.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace summon::tests {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Unit "u" holds tensors "u.a" and "u.b"; version k of a tensor has
// checksum base + 10 k (version 0: the initial values).
constexpr uint64_t kA = 100, kB = 200;

absl::Time At(int seconds) {
  return absl::UnixEpoch() + absl::Seconds(seconds);
}

std::map<std::string, uint64_t> Version(int k) {
  return {{"u.a", kA + 10 * k}, {"u.b", kB + 10 * k}};
}

Op Write(int k, int from, int to, Outcome outcome, uint64_t epoch = 1) {
  Op op;
  op.kind = OpKind::kWrite;
  op.unit = "u";
  op.seed = 1000 + k;
  op.checksums = Version(k);
  op.start = At(from);
  op.end = At(to);
  op.outcome = outcome;
  op.epoch = epoch;
  if (outcome != Outcome::kOk) op.error = "UNAVAILABLE: electing a leader";
  return op;
}

Op Read(std::map<std::string, uint64_t> checksums, int from, int to,
        uint64_t generation = 1, uint64_t epoch = 1, int worker = 0) {
  Op op;
  op.kind = OpKind::kRead;
  op.worker = worker;
  op.unit = "u";
  op.checksums = std::move(checksums);
  op.start = At(from);
  op.end = At(to);
  op.generation = generation;
  op.epoch = epoch;
  return op;
}

CheckInput Input(std::vector<Op> ops, int end_version) {
  CheckInput input;
  for (size_t i = 0; i < ops.size(); ++i) ops[i].id = static_cast<int>(i);
  input.ops = std::move(ops);
  input.unit_of = {{"u.a", "u"}, {"u.b", "u"}};
  input.initial = Version(0);
  for (int node : {0, 1, 2}) input.final_reads[node] = Version(end_version);
  return input;
}

TEST(HistoryTest, ACorrectHistoryPasses) {
  // Write 2 failed at once: the end may not show it. Write 3's outcome is
  // unknown and the end shows it, which is allowed.
  CheckResult result = CheckHistory(Input(
      {Read(Version(0), 0, 1), Write(1, 1, 2, Outcome::kOk),
       Read(Version(1), 3, 4, 2), Write(2, 4, 5, Outcome::kFailed),
       Write(3, 5, 9, Outcome::kUnknown, 2), Read(Version(1), 6, 7, 2, 2)},
      3));
  EXPECT_THAT(result.violations, IsEmpty());
  EXPECT_EQ(result.violation_count, 0);
  EXPECT_EQ(result.ops, 6);
  EXPECT_EQ(result.acked, 1);
  EXPECT_EQ(result.failed, 1);
  EXPECT_EQ(result.unknown, 1);
  // Nothing succeeded between the read ending at 4 and the one ending at 7.
  EXPECT_EQ(result.max_unavailable, absl::Seconds(3));
}

TEST(HistoryTest, ALostAcknowledgementFails) {
  CheckResult result =
      CheckHistory(Input({Write(1, 1, 2, Outcome::kOk)}, 0));
  EXPECT_THAT(result.violations,
              ElementsAre("lost ack: unit 'u' ends at version 0, not at "
                          "acknowledged write #0 (node 0, epoch 1) (version "
                          "1) or later"));
}

TEST(HistoryTest, AHalfAppliedWritebackFails) {
  // One read sees u.a written and u.b not.
  CheckResult torn = CheckHistory(
      Input({Write(1, 1, 2, Outcome::kOk),
             Read({{"u.a", kA + 10}, {"u.b", kB}}, 3, 4)},
            1));
  EXPECT_THAT(torn.violations,
              ElementsAre("half applied: read #1 (node 0, epoch 1) read u.a "
                          "at version 1 but u.b at version 0 (one unit, one "
                          "writeback)"));
  // Node 2 ends without the write the others hold.
  CheckInput input = Input({Write(1, 1, 2, Outcome::kUnknown)}, 1);
  input.final_reads[2] = Version(0);
  EXPECT_THAT(CheckHistory(input).violations,
              ElementsAre("half applied: unit 'u' ends at version 1 via node "
                          "0 but at version 0 via node 2"));
}

TEST(HistoryTest, APhantomReadFails) {
  CheckResult result = CheckHistory(
      Input({Read({{"u.a", 999}, {"u.b", kB}}, 1, 2)}, 0));
  EXPECT_THAT(result.violations,
              ElementsAre("phantom read: read #0 (node 0, epoch 1) read u.a "
                          "with checksum 3e7: neither the initial values nor "
                          "any write's"));
  // The values of a write that definitely failed are never seen.
  CheckResult failed = CheckHistory(
      Input({Write(1, 1, 2, Outcome::kFailed), Read(Version(1), 3, 4)}, 0));
  ASSERT_FALSE(failed.violations.empty());
  EXPECT_EQ(failed.violations[0],
            "phantom read: read #1 (node 0, epoch 1) saw the values of write "
            "#0 (node 0, epoch 1), which failed (UNAVAILABLE: electing a "
            "leader)");
}

TEST(HistoryTest, ListsFivePerRuleAndCountsThemAll) {
  std::vector<Op> ops;
  for (int i = 0; i < 7; ++i) {
    ops.push_back(Read({{"u.a", 999}, {"u.b", kB}}, 2 * i, 2 * i + 1));
  }
  CheckResult result = CheckHistory(Input(ops, 0));
  EXPECT_EQ(result.violations.size(), 5u);
  EXPECT_EQ(result.violation_count, 7);
}

TEST(HistoryTest, AGenerationGoingBackFails) {
  CheckResult result = CheckHistory(
      Input({Read(Version(0), 1, 2, 5), Read(Version(0), 3, 4, 4)}, 0));
  EXPECT_THAT(result.violations,
              ElementsAre("generation regression: reader 0: read #1 (node 0, "
                          "epoch 1) gathered unit 'u' at generation 4 after "
                          "read #0 (node 0, epoch 1) at 5"));
}

TEST(HistoryTest, AStaleReadAfterAnAcknowledgementFails) {
  CheckResult result = CheckHistory(
      Input({Write(1, 1, 2, Outcome::kOk), Read(Version(0), 3, 4)}, 1));
  EXPECT_THAT(result.violations,
              ElementsAre("stale version: read #1 (node 0, epoch 1) saw "
                          "version 0 of unit 'u' after write #0 (node 0, "
                          "epoch 1) had seen version 1"));
}

TEST(HistoryTest, ADeposedEpochsWriteAppliedLaterFails) {
  // Write 1 from epoch 1 ended unknown; a read in epoch 2 does not see it,
  // yet a later read does: the deposed leader applied it.
  CheckResult result = CheckHistory(
      Input({Write(1, 1, 2, Outcome::kUnknown, 1),
             Read(Version(0), 3, 4, 1, 2), Read(Version(1), 5, 6, 2, 2)},
            1));
  EXPECT_THAT(result.violations,
              ElementsAre("deposed epoch: write #0 (node 0, epoch 1) (version "
                          "1) was not applied when read #1 (node 0, epoch 2) "
                          "was served in a later epoch, yet read #2 (node 0, "
                          "epoch 2) saw it"));
}

}  // namespace
}  // namespace summon::tests
