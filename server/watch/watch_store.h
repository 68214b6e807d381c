#ifndef SUMMON_SERVER_WATCH_WATCH_STORE_H_
#define SUMMON_SERVER_WATCH_WATCH_STORE_H_

// The leader's watches and their bounded history: per watched parameter
// (and gradient) a ring of the last K records, persisted per model in
// <data-dir>/watches/<model>.json (written under a temporary name and
// renamed) so a restarted daemon keeps them. Thread-safe.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/watch_stats.h"

namespace summon::server {

// What `summonctl watch add` asked for, with the FQNs it matched.
struct WatchSpec {
  std::string model;
  std::vector<std::string> globs;  // Empty: every parameter.
  int every = 1;
  int bins = 0;
  bool grads = false;
  std::vector<std::string> watched;  // Primary FQNs, in the model's order.
  std::string created_by;
  absl::Time created_at = absl::UnixEpoch();
};

// One parameter (or gradient) at one optimizer step.
struct WatchRecord {
  int64_t step = 0;
  absl::Time recorded_at = absl::UnixEpoch();
  absl::Duration latency;  // OPTIMIZER's end to the record.
  core::WatchStatistics stats;
};

struct WatchHistory {
  std::deque<WatchRecord> records;  // Oldest first, at most K.
  std::optional<int64_t> first_nonfinite_step;
};

struct WatchInfo {
  WatchSpec spec;
  std::optional<int64_t> last_step;
};

// Whether `fqn` matches the glob (fnmatch: `*` and `?`, `*` crossing dots).
bool WatchGlobMatches(const std::string& glob, const std::string& fqn);

class WatchStore {
 public:
  // `data_dir` empty: nothing persisted. `history`: records kept per
  // parameter (K >= 1).
  WatchStore(std::string data_dir, int history);

  // Reads every persisted watch; a malformed file is logged and skipped.
  absl::Status Load();

  int history() const { return history_; }

  // Adds or replaces the model's watch (its history starts empty).
  absl::Status Add(WatchSpec spec);
  // NOT_FOUND when the model has no watch.
  absl::Status Remove(const std::string& model);
  // Forgets a deleted model's watch silently.
  void Forget(const std::string& model);
  std::vector<WatchInfo> List() const;
  std::optional<WatchSpec> Get(const std::string& model) const;
  // Records of steps >= since. NOT_FOUND for a model without a watch or a
  // parameter it does not watch (or a gradient it does not record).
  absl::StatusOr<WatchHistory> Show(const std::string& model,
                                    const std::string& param, bool grad,
                                    int64_t since) const;
  // The range the next record of (param, grad) bins over: the previous
  // record's [min, max]; none before the first record.
  std::optional<core::HistogramRange> NextRange(const std::string& model,
                                                const std::string& param,
                                                bool grad) const;

  // What Record reports back: the parameters whose first NaN or Inf this
  // step is (for the log and the counter).
  struct Recorded {
    std::vector<std::pair<std::string, bool>> first_nonfinite;
  };
  // Appends one step's records ((param, grad) -> record), trims every ring
  // to K and persists the model's file. Ignored (OK, nothing recorded)
  // when the watch was removed or replaced meanwhile (`created_at` names
  // the watch the records were computed for).
  absl::StatusOr<Recorded> Record(
      const std::string& model, absl::Time created_at,
      std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>>
          records);

 private:
  struct Entry {
    WatchSpec spec;
    std::optional<int64_t> last_step;
    // (param, grad) -> its ring.
    std::map<std::pair<std::string, bool>, WatchHistory> histories;
  };

  absl::Status Persist(const Entry& entry) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string PathOf(const std::string& model) const;

  const std::string data_dir_;
  const int history_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WATCH_WATCH_STORE_H_
