#include "bench/anchors/anchors.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace summon::bench {
namespace {

constexpr int64_t kBytes = int64_t{1} << 20;

TEST(MemcpyMicrosTest, ReturnsOneTimingPerTimedIteration) {
  absl::StatusOr<std::vector<double>> us = MemcpyMicros({kBytes, 1, 3});
  ASSERT_TRUE(us.ok()) << us.status();
  EXPECT_EQ(us->size(), 3u);
  for (double sample : *us) EXPECT_GE(sample, 0);
}

TEST(MemcpyMicrosTest, RefusesEmptyRuns) {
  EXPECT_FALSE(MemcpyMicros({0, 1, 3}).ok());
  EXPECT_FALSE(MemcpyMicros({kBytes, 1, 0}).ok());
}

TEST(LoopbackTcpMicrosTest, MovesEveryByteInSmallWrites) {
  // Writes smaller than the transfer and not dividing it.
  absl::StatusOr<std::vector<double>> us =
      LoopbackTcpMicros({kBytes + 3, 1, 2}, 100000);
  ASSERT_TRUE(us.ok()) << us.status();
  EXPECT_EQ(us->size(), 2u);
}

TEST(GlooAllgatherMicrosTest, WorkerProcessesGatherAndRankZeroReports) {
  const std::string binary =
      std::string(std::getenv("TEST_SRCDIR")) + "/summon/bench/anchors/anchor";
  absl::StatusOr<std::vector<double>> us =
      GlooAllgatherMicros(binary, 2, {kBytes, 1, 3});
  ASSERT_TRUE(us.ok()) << us.status();
  EXPECT_EQ(us->size(), 3u);
}

TEST(GlooAllgatherMicrosTest, AMissingBinaryIsAnError) {
  EXPECT_FALSE(
      GlooAllgatherMicros("/nonexistent/anchor", 2, {kBytes, 1, 1}).ok());
}

TEST(AnchorBinaryPathTest, AnOverrideWins) {
  EXPECT_EQ(AnchorBinaryPath("/x/anchor"), "/x/anchor");
  EXPECT_NE(AnchorBinaryPath("").find("/anchors/anchor"), std::string::npos);
}

}  // namespace
}  // namespace summon::bench
