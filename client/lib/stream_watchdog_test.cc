#include "client/lib/stream_watchdog.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

TEST(StreamWatchdogTest, FiresOnlyAfterTheIdleTimeWithoutProgress) {
  grpc::ClientContext context;
  StreamWatchdog watchdog(&context, absl::Milliseconds(300));
  // Progress every 100 ms keeps it quiet for longer than the idle time.
  for (int i = 0; i < 6; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    watchdog.Progress();
  }
  EXPECT_FALSE(watchdog.fired());
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_TRUE(watchdog.fired());
}

TEST(StreamWatchdogTest, AnInfiniteIdleTimeNeverFires) {
  grpc::ClientContext context;
  StreamWatchdog watchdog(&context, absl::InfiniteDuration());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(watchdog.fired());
}

}  // namespace
}  // namespace summon::client
