#include "bench/compare_table.h"

#include "gtest/gtest.h"

namespace summon::bench {
namespace {

CompareRow Row() {
  CompareRow row;
  row.bytes = 1000000000;
  row.count = 250000000;
  row.type = "float";
  row.summon_us = {4e6, 2e6, 3e6};
  row.anchor_us = {1e6, 1.5e6, 0.5e6};
  row.wrong = 0;
  return row;
}

TEST(FiguresOfTest, RatioIsAnchorTimeOverSummonTime) {
  const CompareFigures f = FiguresOf(Row());
  EXPECT_EQ(f.summon_median_us, 3e6);
  EXPECT_EQ(f.summon_min_us, 2e6);
  EXPECT_EQ(f.anchor_median_us, 1e6);
  EXPECT_EQ(f.anchor_min_us, 0.5e6);
  // summon at a third of the anchor's bandwidth by medians, a quarter by
  // the fastest iterations.
  EXPECT_DOUBLE_EQ(f.ratio_median, 1.0 / 3);
  EXPECT_DOUBLE_EQ(f.ratio_best, 0.25);
}

TEST(FiguresOfTest, NoSamplesGiveZeroNotInfinity) {
  const CompareFigures f = FiguresOf(CompareRow{});
  EXPECT_EQ(f.ratio_median, 0);
  EXPECT_EQ(f.ratio_best, 0);
}

TEST(FormatCompareRowTest, PrintsBothSidesAndTheRatios) {
  EXPECT_EQ(
      FormatCompareRow(Row()),
      "  1000000000        250000000  float   3000000.0   2000000.0  "
      "    0.33   1000000.0    500000.0      1.00    0.33    0.25       0");
}

TEST(FormatCompareRowTest, HeaderColumnsLineUpWithTheRow) {
  const std::string header = CompareHeader("session open", "memcpy");
  EXPECT_EQ(header.substr(0, header.find('\n')), "# session open vs memcpy");
  EXPECT_EQ(header.substr(header.find('\n') + 1).size(),
            FormatCompareRow(Row()).size());
}

TEST(FormatCompareRowTest, FirstTouchColumnsFollowWhenMeasured) {
  CompareRow row = Row();
  row.touch_us = {4e6, 5e6, 1e7};       // Median 5 s: 0.20 GB/s.
  row.touch_huge_us = {1e5, 2e5, 3e5};  // Median 0.2 s: 5.00 GB/s.
  EXPECT_EQ(FormatCompareRow(row),
            FormatCompareRow(Row()) + "      0.20      5.00");
  const std::string header = CompareHeader("session open", "memcpy", true);
  EXPECT_EQ(header.substr(header.find('\n') + 1).size(),
            FormatCompareRow(row).size());
  EXPECT_NE(header.find("t.algbw"), std::string::npos);
}

TEST(LoadAverageLineTest, NamesTheLoadAverage) {
  EXPECT_EQ(LoadAverageLine().rfind("# load average at start: ", 0), 0u);
}

}  // namespace
}  // namespace summon::bench
