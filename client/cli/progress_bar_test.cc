#include "client/cli/progress_bar.h"

#include <sstream>

#include "gtest/gtest.h"

namespace summon::client {
namespace {

TEST(ProgressBarTest, LineShowsBytesPercentRateAndTimeLeft) {
  EXPECT_EQ(ProgressBar::Line(256 << 20, int64_t{1} << 30, absl::Seconds(1)),
            "256.0 MiB/1.0 GiB  25%  256.0 MiB/s  ETA 3s");
  EXPECT_EQ(ProgressBar::Line(0, 1000, absl::ZeroDuration()),
            "0.0 B/1000.0 B  0%");
}

TEST(ProgressBarTest, RedrawsInPlaceAtMostEvery100Ms) {
  std::ostringstream out;
  absl::Time now = absl::FromUnixSeconds(0);
  ProgressBar bar(out, "read w", 400, [&] { return now; });
  now += absl::Seconds(1);
  bar.Add(100);  // Drawn: the first redraw.
  now += absl::Milliseconds(50);
  bar.Add(100);  // Too soon: not drawn.
  now += absl::Milliseconds(950);
  bar.Add(200);
  bar.Finish();
  EXPECT_EQ(out.str(),
            "\rread w  100.0 B/400.0 B  25%  100.0 B/s  ETA 3s\x1b[K"
            "\rread w  400.0 B/400.0 B  100%  200.0 B/s  ETA 0s\x1b[K"
            "\rread w  400.0 B/400.0 B  100%  200.0 B/s  ETA 0s\x1b[K\n");
}

}  // namespace
}  // namespace summon::client
