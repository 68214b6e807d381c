#include "server/metrics/registry.h"

#include "gtest/gtest.h"

namespace summon::server::metrics {
namespace {

TEST(RegistryTest, RendersCountersGaugesHistogramsAndCallbacks) {
  Registry registry;
  Family* opens = registry.Counter("t_opens_total", "Opens.", {"result"});
  opens->Add({"OK"});
  opens->Add({"OK"}, 2);
  opens->Add({"NOT_FOUND"});
  Family* latency = registry.Histogram("t_seconds", "Latency.", {0.1, 1});
  latency->Observe({}, 0.05);
  latency->Observe({}, 0.5);
  latency->Observe({}, 5);
  registry.CallbackGauge("t_open", "Open.", {"kind"}, [] {
    return Registry::Samples{{{"readonly"}, 2}, {{"wri\"te"}, 1}};
  });
  EXPECT_EQ(opens->Value({"OK"}), 3);
  EXPECT_EQ(registry.Render(),
            "# HELP t_open Open.\n# TYPE t_open gauge\n"
            "t_open{kind=\"readonly\"} 2\nt_open{kind=\"wri\\\"te\"} 1\n"
            "# HELP t_opens_total Opens.\n# TYPE t_opens_total counter\n"
            "t_opens_total{result=\"NOT_FOUND\"} 1\n"
            "t_opens_total{result=\"OK\"} 3\n"
            "# HELP t_seconds Latency.\n# TYPE t_seconds histogram\n"
            "t_seconds_bucket{le=\"0.1\"} 1\n"
            "t_seconds_bucket{le=\"1\"} 2\nt_seconds_bucket{le=\"+Inf\"} 3\n"
            "t_seconds_sum 5.55\nt_seconds_count 3\n");
}

TEST(RegistryTest, CallbackCountersAreDeclaredCountersAndSumPerName) {
  Registry registry;
  // Two servers in one process: their counts add up under one header.
  for (double reuses : {2.0, 3.0}) {
    registry.CallbackCounter("t_reuses_total", "Reuses.", {}, [reuses] {
      return Registry::Samples{{{}, reuses}};
    });
  }
  EXPECT_EQ(registry.Render(),
            "# HELP t_reuses_total Reuses.\n# TYPE t_reuses_total counter\n"
            "t_reuses_total 5\n");
}

}  // namespace
}  // namespace summon::server::metrics
