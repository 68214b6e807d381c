// The watch worker's bounded queue (issue 21): a record slower than the
// steps keeps at most one pending step per model, each step it drops is
// counted once with its reason, and a step whose shards moved on before
// they were read is counted as stale, never recorded under its number.

#include "server/watch/watcher.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

// Every parameter: one element of value 2. The first call waits until the
// test opens the gate, as a slow shard read would.
class GatedNodes : public WatchNodes {
 public:
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> Partials(
      const WatchPartialsRequest& request) override {
    bool first;
    {
      absl::MutexLock lock(&mu_);
      first = ++calls_ == 1;
    }
    if (first) entered_.Notify();
    gate_.WaitForNotification();
    std::vector<core::WatchPartial> partials;
    for (size_t i = 0; i < request.params.size(); ++i) {
      core::WatchPartial partial = core::EmptyWatchPartial(0, false);
      partial.numel = partial.finite = 1;
      partial.sum = partial.min = partial.max = partial.abs_max = 2;
      partial.sum_of_squares = 4;
      partials.push_back(partial);
    }
    return std::vector<std::vector<core::WatchPartial>>{partials};
  }
  void WaitEntered() { entered_.WaitForNotification(); }
  void Open() { gate_.Notify(); }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Notification entered_;
  absl::Notification gate_;
  absl::Mutex mu_;
  int calls_ = 0;
};

WatchSpec SpecOf(const std::string& model) {
  WatchSpec spec;
  spec.model = model;
  spec.watched = {"w"};
  spec.created_at = absl::FromUnixMillis(1000);
  return spec;
}

std::vector<int64_t> StepsOf(const WatchStore& store,
                             const std::string& model) {
  std::vector<int64_t> steps;
  absl::StatusOr<WatchHistory> history = store.Show(model, "w", false, 0);
  EXPECT_TRUE(history.ok()) << history.status();
  if (!history.ok()) return steps;
  for (const WatchRecord& record : history->records) {
    steps.push_back(record.step);
  }
  return steps;
}

TEST(WatcherTest, ASlowRecordKeepsOnePendingStepPerModel) {
  WatchStore store("", 100);
  ASSERT_TRUE(store.Add(SpecOf("a")).ok());
  ASSERT_TRUE(store.Add(SpecOf("b")).ok());
  GatedNodes nodes;
  metrics::Registry registry;
  Watcher watcher(&store, &nodes, &registry);
  watcher.Notify("a", 1, absl::Now());
  nodes.WaitEntered();  // Step 1 of a is being read, slowly.
  // 1000 steps of each model arrive meanwhile: one of each waits.
  for (int64_t step = 2; step <= 1001; ++step) {
    watcher.Notify("a", step, absl::Now());
    watcher.Notify("b", step, absl::Now());
    ASSERT_LE(watcher.pending(), 2u);
  }
  EXPECT_EQ(watcher.pending(), 2u);
  nodes.Open();
  watcher.Drain();
  EXPECT_EQ(StepsOf(store, "a"), (std::vector<int64_t>{1, 1001}));
  EXPECT_EQ(StepsOf(store, "b"), (std::vector<int64_t>{1001}));
  EXPECT_EQ(nodes.calls(), 3);
  metrics::Family* skipped =
      registry.Counter("summon_watch_skipped_total", "", {"model", "reason"});
  EXPECT_EQ(skipped->Value({"a", "queue"}), 999);  // steps 2..1000
  EXPECT_EQ(skipped->Value({"b", "queue"}), 999);
  EXPECT_EQ(skipped->Value({"a", "stale"}), 0);
  EXPECT_EQ(watcher.pending(), 0u);
}

TEST(WatcherTest, AStepWhoseShardsMovedOnIsStale) {
  WatchStore store("", 100);
  ASSERT_TRUE(store.Add(SpecOf("a")).ok());
  GatedNodes nodes;
  nodes.Open();
  metrics::Registry registry;
  absl::Mutex mu;
  Watcher::StepState state;
  Watcher watcher(&store, &nodes, &registry, [&](const std::string&) {
    absl::MutexLock lock(&mu);
    return state;
  });
  {
    absl::MutexLock lock(&mu);
    state.done_step = 2;
  }
  watcher.Notify("a", 1, absl::Now());  // step 2 already ended: stale
  watcher.Drain();
  watcher.Notify("a", 2, absl::Now());
  watcher.Drain();
  {
    absl::MutexLock lock(&mu);
    state.in_optimizer = true;  // step 3 is changing the shards
  }
  watcher.Notify("a", 3, absl::Now());
  watcher.Drain();
  metrics::Family* skipped =
      registry.Counter("summon_watch_skipped_total", "", {"model", "reason"});
  EXPECT_EQ(StepsOf(store, "a"), (std::vector<int64_t>{2}));
  EXPECT_EQ(skipped->Value({"a", "stale"}), 2);
  EXPECT_EQ(skipped->Value({"a", "queue"}), 0);
}

// A parameter's partial over its elements 1 and 3, binned over `range`
// into `bins` bins when there is one.
core::WatchPartial PartialOfOneAndThree(
    int bins, const std::optional<core::HistogramRange>& range) {
  core::WatchPartial partial =
      core::EmptyWatchPartial(range.has_value() ? bins : 0, range.has_value());
  const float values[] = {1.0F, 3.0F};
  EXPECT_TRUE(core::AccumulateWatchPartial(core::DType::kFloat32, values, 2,
                                           range, &partial)
                  .ok());
  return partial;
}

// Every parameter: elements 1 and 3, so a range pass finds [1, 3]. Keeps
// each request's ranges, and runs `after_call` after each, as the
// training's next OPTIMIZER would arrive during a slow read.
class RecordingNodes : public WatchNodes {
 public:
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> Partials(
      const WatchPartialsRequest& request) override {
    std::vector<core::WatchPartial> partials;
    for (size_t i = 0; i < request.params.size(); ++i) {
      partials.push_back(PartialOfOneAndThree(
          request.bins,
          i < request.ranges.size() ? request.ranges[i] : std::nullopt));
    }
    ranges.push_back(request.ranges);
    if (after_call) after_call();
    return std::vector<std::vector<core::WatchPartial>>{partials};
  }
  std::vector<std::vector<std::optional<core::HistogramRange>>> ranges;
  std::function<void()> after_call;
};

TEST(WatcherTest, ARangeFoundForASkippedStepServesTheNextStepInOnePass) {
  WatchStore store("", 100);
  WatchSpec spec = SpecOf("a");
  spec.bins = 4;
  ASSERT_TRUE(store.Add(spec).ok());
  RecordingNodes nodes;
  absl::Mutex mu;
  Watcher::StepState state;
  state.done_step = 1;
  Watcher watcher(&store, &nodes, nullptr, [&](const std::string&) {
    absl::MutexLock lock(&mu);
    return state;
  });
  // Step 1: the range pass runs, then step 2's OPTIMIZER begins: skipped
  // before the binning pass.
  nodes.after_call = [&] {
    absl::MutexLock lock(&mu);
    state.in_optimizer = true;
  };
  watcher.Notify("a", 1, absl::Now());
  watcher.Drain();
  ASSERT_EQ(nodes.ranges.size(), 1u);
  EXPECT_FALSE(nodes.ranges[0][0].has_value());  // the range pass
  EXPECT_TRUE(StepsOf(store, "a").empty());
  // Step 2 ended: one pass, binned over the range step 1's pass found.
  nodes.after_call = nullptr;
  {
    absl::MutexLock lock(&mu);
    state.in_optimizer = false;
    state.done_step = 2;
  }
  watcher.Notify("a", 2, absl::Now());
  watcher.Drain();
  ASSERT_EQ(nodes.ranges.size(), 2u);
  ASSERT_TRUE(nodes.ranges[1][0].has_value());
  // The range of elements 1 and 3.
  EXPECT_EQ(nodes.ranges[1][0]->lower, 1.0);
  EXPECT_EQ(nodes.ranges[1][0]->upper, 3.0);
  EXPECT_EQ(StepsOf(store, "a"), (std::vector<int64_t>{2}));
  absl::StatusOr<WatchHistory> history = store.Show("a", "w", false, 0);
  ASSERT_TRUE(history.ok());
  const std::vector<int64_t>& bins = history->records[0].stats.histogram;
  // 1 in the first of the four bins over [1, 3], 3 in the last.
  EXPECT_EQ(bins, (std::vector<int64_t>{1, 0, 0, 1}));
}

}  // namespace
}  // namespace summon::server
