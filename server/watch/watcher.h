#ifndef SUMMON_SERVER_WATCH_WATCHER_H_
#define SUMMON_SERVER_WATCH_WATCHER_H_

// The leader's watch worker: the interlock tells it when a model's step
// left OPTIMIZER (Notify, which only queues); a thread of its own asks
// every node for its partials, combines them, records the step in the
// WatchStore and sends the record to the followers, off the trainer's path.
//
// The queue holds at most one pending step per watched model: a step that
// arrives while the model's previous one still waits replaces it (the
// older one could only be read as it is now, i.e. as the newer step), so
// a record slower than the steps costs neither memory nor a backlog. Each
// step not recorded is counted in summon_watch_skipped_total{model,
// reason}: "queue" (replaced while waiting) or "stale" (the next optimizer
// step began before its shards were read).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/registry.h"
#include "server/watch/watch_partials.h"
#include "server/watch/watch_replication.h"
#include "server/watch/watch_store.h"

namespace summon::server {

class Watcher {
 public:
  // Where a model's training is: the last step every rank finished, and
  // whether a rank is in OPTIMIZER now (its shards are changing).
  struct StepState {
    std::optional<int64_t> done_step;
    bool in_optimizer = false;
  };
  using StepProbe = std::function<StepState(const std::string& model)>;

  // `metrics` null: no metrics (tests). `probe` null: every queued step is
  // recorded as read. `replication` null: no followers to send records to.
  Watcher(WatchStore* store, WatchNodes* nodes, metrics::Registry* metrics,
          StepProbe probe = nullptr, WatchReplication* replication = nullptr);
  ~Watcher();  // Finishes the queued steps, then stops.

  // Every rank of `model` left OPTIMIZER for `step` at `ended`. Queues a
  // record when the model has a watch and the step is one of its every-N.
  // Never blocks on shards or nodes.
  void Notify(const std::string& model, int64_t step, absl::Time ended);

  // Waits until every step queued so far is recorded (tests, bench).
  void Drain();
  // Steps waiting (not the one being recorded): at most one per model.
  size_t pending() const;

 private:
  struct Job {
    std::string model;
    int64_t step = 0;
    absl::Time ended;
  };
  void Run();
  void RecordStep(const Job& job);
  void Skip(const Job& job, const char* reason, const char* why);

  WatchStore* const store_;
  WatchNodes* const nodes_;
  const StepProbe probe_;
  WatchReplication* const replication_;
  metrics::Family* nonfinite_ = nullptr;
  metrics::Family* skipped_ = nullptr;
  int norm_gauge_ = 0;
  metrics::Registry* metrics_;

  // The range a range pass found for (model, watch created_at, param,
  // grad) whose record was then skipped (its step moved on before the
  // binning pass): the next step bins over it in one pass instead of
  // starting with a range pass again, so a busy node whose records are
  // often late still reaches one pass per record. Dropped once the watch
  // has a stored record (whose range takes over). Worker thread only.
  using RangeKey = std::tuple<std::string, int64_t, std::string, bool>;
  std::map<RangeKey, core::HistogramRange> found_ranges_;

  mutable absl::Mutex mu_;
  // Oldest first; at most one job per model.
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WATCH_WATCHER_H_
