#ifndef SUMMON_SERVER_WATCH_WATCH_STORE_H_
#define SUMMON_SERVER_WATCH_WATCH_STORE_H_

// A node's watches and their bounded history: per watched parameter (and
// gradient) a ring of the last K records, persisted per model in
// <data-dir>/watches/<model>.json (written under a temporary name and
// renamed) so a restarted daemon keeps them. The leader records; every
// follower keeps a replica of the same state (WatchChunk, applied in the
// leader's order), so a leader that lost its files gets them back from
// any follower (server/watch/watch_replication.h). A removed watch leaves
// a tombstone (its model and created_at, a few bytes) so no node's stale
// copy brings it back. Thread-safe.

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

// One watch's identity and progress on a node, compared across nodes to
// find the newest state of each watch.
struct WatchVersion {
  std::string model;
  absl::Time created_at = absl::UnixEpoch();  // Whole milliseconds.
  // A tombstone: the watch created at `created_at` (and any older) is gone.
  bool removed = false;
  int64_t last_step = -1;  // -1: nothing recorded.

  // Newer: a later created_at (a re-added watch); at the same created_at a
  // removal, then more steps recorded (records only ever append).
  bool NewerThan(const WatchVersion& other) const;
  bool operator==(const WatchVersion& other) const;
  bool operator!=(const WatchVersion& other) const { return !(*this == other); }
};

// A piece of one watch's state sent from the leader to a follower (or
// fetched back from one): a whole watch is kReplace (the spec), kAppend
// (records of some histories, oldest first, each piece bounded in bytes)
// and kCommit (complete at `last_step`); a recorded step is one kRecord
// (applied only on top of `previous_step`); a removal is one kRemove.
struct WatchChunk {
  enum class Kind { kReplace, kAppend, kCommit, kRecord, kRemove };
  Kind kind = Kind::kReplace;
  std::string model;
  absl::Time created_at = absl::UnixEpoch();
  // kRecord: the step the receiver's last record must be (-1: none);
  // kCommit: the last step recorded.
  int64_t previous_step = -1;
  // kReplace: the spec; kAppend and kRecord: {"histories": [...]}.
  std::string json;
};

class WatchStore {
 public:
  // `data_dir` empty: nothing persisted. `history`: records kept per
  // parameter (K >= 1).
  WatchStore(std::string data_dir, int history);

  // Reads every persisted watch; a malformed file is logged and skipped.
  absl::Status Load();

  int history() const { return history_; }

  // Adds or replaces the model's watch (its history starts empty;
  // created_at is kept in whole milliseconds, as every node stores it).
  absl::Status Add(WatchSpec spec);
  // Leaves a tombstone. NOT_FOUND when the model has no watch.
  absl::Status Remove(const std::string& model);
  // Forgets a deleted model's watch silently (a tombstone too).
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
    // The same records for the followers (kRecord); unset when nothing
    // was recorded.
    std::optional<WatchChunk> chunk;
  };
  // Appends one step's records ((param, grad) -> record), trims every ring
  // to K and persists the model's file. Ignored (OK, nothing recorded)
  // when the watch was removed or replaced meanwhile (`created_at` names
  // the watch the records were computed for).
  absl::StatusOr<Recorded> Record(
      const std::string& model, absl::Time created_at,
      std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>>
          records);

  // Replication. Every complete watch and tombstone this node holds.
  std::vector<WatchVersion> Versions() const;
  // The model's whole state as chunks of at most about `max_bytes` of JSON
  // each (a tombstone: one kRemove); empty when this node knows nothing of
  // the model.
  std::vector<WatchChunk> Export(const std::string& model,
                                 size_t max_bytes) const;
  // Applies a chunk another node sent (persisting at kCommit, kRecord and
  // kRemove). INVALID_ARGUMENT for a malformed chunk; FAILED_PRECONDITION
  // when it does not follow what this node holds (a kRecord on another
  // watch or step: the sender then sends the whole watch).
  absl::Status Apply(const WatchChunk& chunk);

 private:
  struct Entry {
    WatchSpec spec;
    std::optional<int64_t> last_step;
    // (param, grad) -> its ring.
    std::map<std::pair<std::string, bool>, WatchHistory> histories;
    // A tombstone: only spec.model and spec.created_at mean anything.
    bool removed = false;
    // False while a whole watch is being applied (kReplace to kCommit):
    // neither served nor persisted nor recorded into.
    bool complete = true;
  };
  using Records =
      std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>>;

  // Appends one step's records and trims the rings; what first held a
  // NaN or Inf.
  std::vector<std::pair<std::string, bool>> AppendLocked(Entry& entry,
                                                         Records records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyLocked(const WatchChunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A live, complete watch of the model, or null.
  const Entry* LiveLocked(const std::string& model) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
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
