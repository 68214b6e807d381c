#include "bench/nccl_table.h"

#include "gtest/gtest.h"

namespace summon::bench {
namespace {

TEST(MedianTest, OddCountIsTheMiddleSample) { EXPECT_EQ(Median({9, 1, 5}), 5); }

TEST(MedianTest, EvenCountIsTheMeanOfTheMiddleSamples) {
  EXPECT_EQ(Median({8, 2, 4, 100}), 6);
}

TEST(MedianTest, NoSamplesIsZero) { EXPECT_EQ(Median({}), 0); }

TEST(PercentileTest, NearestRank) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  EXPECT_EQ(Percentile(samples, 50), 50);
  EXPECT_EQ(Percentile(samples, 99), 99);
  EXPECT_EQ(Percentile(samples, 100), 100);
}

TEST(PercentileTest, FewSamplesRoundUpToTheNextSample) {
  EXPECT_EQ(Percentile({30, 10, 20}, 50), 20);
  EXPECT_EQ(Percentile({30, 10, 20}, 99), 30);
  EXPECT_EQ(Percentile({30, 10, 20}, 0), 10);
}

TEST(GatherBusFactorTest, IsGroupMinusOneOverGroup) {
  EXPECT_EQ(GatherBusFactor(4), 0.75);
  EXPECT_EQ(GatherBusFactor(2), 0.5);
  EXPECT_EQ(GatherBusFactor(1), 1);
}

TEST(FormatBandwidthRowTest, AlgbwIsBytesOverTimeAndBusbwScalesIt) {
  // 1 GB in 1e6 us = 1 GB/s; busbw 0.75 of it.
  BandwidthRow row;
  row.bytes = 1000000000;
  row.count = 250000000;
  row.type = "float";
  row.time_us = 1e6;
  row.bus_factor = 0.75;
  row.wrong = 3;
  EXPECT_EQ(FormatBandwidthRow(row),
            "  1000000000        250000000  float   1000000.0         1.00"
            "         0.75       3");
}

TEST(FormatBandwidthRowTest, HeaderColumnsLineUpWithTheRow) {
  const std::string header = BandwidthHeader("session open");
  const std::string columns = header.substr(header.find('\n') + 1);
  EXPECT_EQ(header.substr(0, header.find('\n')), "# session open");
  EXPECT_EQ(columns.size(), FormatBandwidthRow({}).size());
}

TEST(FormatLatencyRowTest, PrintsPercentiles) {
  LatencyRow row;
  row.bytes = 1024;
  row.count = 256;
  row.type = "float";
  row.mode = "readonly";
  row.repeats = 200;
  row.p50_us = 812.34;
  row.p99_us = 1500.06;
  EXPECT_EQ(FormatLatencyRow(row),
            "        1024              256  float   readonly      200       "
            "812.3      1500.1       0");
  const std::string header = LatencyHeader("tiny");
  EXPECT_EQ(header.substr(header.find('\n') + 1).size(),
            FormatLatencyRow(row).size());
}

}  // namespace
}  // namespace summon::bench
