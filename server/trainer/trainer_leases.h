#ifndef SUMMON_SERVER_TRAINER_TRAINER_LEASES_H_
#define SUMMON_SERVER_TRAINER_TRAINER_LEASES_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/trainer_rules.h"
#include "server/model/model_registry.h"

namespace summon::server {

// Attached trainers (R17): one lease per trainer incarnation on some ranks
// of a model, renewed by heartbeats and phase reports. A lease that lapses
// returns its ranks to IDLE within lease_seconds + the reap interval, and the
// event is logged and kept for the model's RankState.last_event.
//
// With a data directory the leases and every model's phases, steps and
// optimizer-step count are written to <data-dir>/trainers.json after each
// change, so a restarted daemon keeps a rank that was mid-step in its phase
// until its trainer re-attaches or the lease lapses. Without fsync: a process
// restart keeps the page cache, and a host reboot loses the shared-memory
// shards the phases describe anyway. A record of at most one page is
// overwritten in place (one pwrite at offset 0, padded with spaces to the
// file's length), which a killed process cannot tear; a longer one replaces
// the file by rename. Every phase report persists, and a rename on a busy
// ext4 disk took up to 60 ms, with this class's mutex held (issue 35).
//
// Lock order: this class's mutex, then a model's runtime_mu.
class TrainerLeases {
 public:
  struct Options {
    std::string data_dir;  // Empty: nothing persists.
    std::function<absl::Time()> clock = absl::Now;
    // How often lapsed leases are looked for; zero: no reaper thread
    // (tests call ReapLapsed).
    absl::Duration reap_interval = absl::Milliseconds(100);
    absl::Duration default_lease = absl::Seconds(10);
    absl::Duration max_lease = absl::Hours(1);
    // Moves every unit's generation of a model on every node when a lease
    // ends with a rank in OPTIMIZER (the session manager's StepCutShort);
    // called without this class's lock. Unset: moved in this node's store.
    std::function<void(const std::string& model)> step_cut_short;
  };

  TrainerLeases(ModelRegistry* registry, Options options);
  ~TrainerLeases();  // Stops the reaper.

  // Reads <data-dir>/trainers.json: phases and steps of the models the
  // registry re-attached, and their leases, each given a fresh lease period
  // from now (its trainer could not renew while the daemon was down).
  absl::Status Recover();

  struct Attached {
    core::TrainerLease lease;
    bool resumed = false;
    std::string previous_incarnation;
  };
  absl::StatusOr<Attached> Attach(const std::string& model,
                                  const std::vector<int>& ranks,
                                  const std::string& incarnation,
                                  std::optional<absl::Duration> lease);
  // Renews; FAILED_PRECONDITION naming why for a lease that ended. The
  // trainer may say that it moved its ranks without this daemon hearing it
  // (`phases_unknown`: the interlock is unknown from now) or that it has
  // reported every rank's phase again (`phases_reestablished`: known).
  absl::StatusOr<core::TrainerLease> Heartbeat(const std::string& lease_id,
                                               bool phases_unknown = false,
                                               bool phases_reestablished = false);
  // Ends the lease; its ranks return to IDLE.
  absl::Status Detach(const std::string& lease_id);
  // R17 for a call naming `rank` of `model` (a phase report): the lease
  // holding it and only that one; renews it. An ended lease fails naming
  // why it ended.
  absl::Status CheckAndRenew(const std::string& model, int rank,
                             const std::string& lease_id);
  // For calls naming a model but no rank (MarkInitialized): the lease must
  // hold some rank of it when any trainer is attached.
  absl::Status CheckModelLease(const std::string& model,
                               const std::string& lease_id);

  // The incarnation holding `rank` (empty: none) and the rank's last event.
  std::pair<std::string, std::string> AttachmentOf(const std::string& model,
                                                   int rank) const;
  // Incarnations attached to `model`, for a delete's refusal.
  std::vector<std::string> AttachedTrainers(const std::string& model) const;
  // Ends every lease on `model`; their next call fails saying `why`.
  void Revoke(const std::string& model, const std::string& why);
  // Drops everything kept about a deleted model.
  void Forget(const std::string& model);

  // Ends lapsed leases (ranks to IDLE; a rank lapsing in OPTIMIZER may have
  // half-stepped shards, so its units' generations move). Returns how many.
  int ReapLapsed();
  // Writes the file after a phase move (a no-op without a data dir).
  void Persist();

  // Whether the training interlock of `model` is known (R1, R3): UNAVAILABLE
  // naming the trainer while an attached trainer may have moved its ranks
  // without this daemon hearing it (summon never stops a training step, so
  // a trainer that cannot reach the leader steps on). That is the case
  // after this daemon restarted (Recover) or did not run for a while (a
  // stall, e.g. SIGSTOP: leases are extended by the stall too), and when a
  // trainer was not heard from for half its lease. Each rank is known again
  // when its trainer reports a phase for it (PhaseKnown).
  absl::Status CheckInterlockKnown(const std::string& model) const;
  void PhaseKnown(const std::string& model, int rank);
  // Whether the lease's trainer must re-establish its ranks' phases.
  bool PhasesUnknown(const std::string& lease_id) const;

 private:
  const core::TrainerLease* HolderOf(const std::string& model, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Attached> AttachLocked(const std::string& model,
                                        const std::vector<int>& ranks,
                                        const std::string& incarnation,
                                        std::optional<absl::Duration> lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the lease, returns its ranks to IDLE, records `event` for each;
  // a rank that was in OPTIMIZER puts its model in cut_short_.
  void EndLease(const std::string& lease_id, const std::string& why,
                bool ranks_to_idle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the generations of the models in cut_short_ (Options::
  // step_cut_short), after the caller released mu_: the move reaches every
  // node over the network.
  void MoveCutShortSteps() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status EndedError(const std::string& lease_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `record` over <data-dir>/trainers.json in place (see the class);
  // false when it does not fit a page or the file cannot be written so.
  bool OverwriteInPlace(const std::string& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaperLoop();
  // Every lease's phases become unknown for `why` (logged once per lease).
  void MarkUnknown(const core::TrainerLease& lease, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // This daemon did not run for `gap`: its trainers could not renew, so
  // every lease is extended by it, and their phases are unknown.
  void OnStall(absl::Duration gap) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ModelRegistry* const registry_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, core::TrainerLease> leases_ ABSL_GUARDED_BY(mu_);
  // Why recently ended leases ended, so a late call is told (bounded).
  std::map<std::string, std::string> ended_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, std::string> last_event_
      ABSL_GUARDED_BY(mu_);
  // The incarnation whose lease on a rank lapsed, until someone attaches:
  // the next Attach reports it as previous_incarnation.
  std::map<std::pair<std::string, int>, std::string> lapsed_holder_
      ABSL_GUARDED_BY(mu_);
  // Leases whose ranks' phases are unknown: the ranks not yet re-reported
  // and why.
  struct Unknown {
    std::vector<int> ranks;
    std::string why;
  };
  std::map<std::string, Unknown> unknown_ ABSL_GUARDED_BY(mu_);
  // Models whose optimizer step a lease's end cut short, not yet moved.
  std::vector<std::string> cut_short_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // trainers.json, open for OverwriteInPlace (-1: not open; closed when a
  // rename replaced the file) and its length.
  int leases_fd_ ABSL_GUARDED_BY(mu_) = -1;
  size_t leases_file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread reaper_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TRAINER_TRAINER_LEASES_H_
