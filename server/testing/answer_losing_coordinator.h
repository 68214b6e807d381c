#ifndef SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_
#define SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_

// A coordinator whose writes of one key prefix go wrong the ways an etcd
// transaction can when its answer does not come back (the caller paused
// past the call's deadline, etcd slow): applied, with the answer lost;
// never applied; or applied later (a proposal in flight through a change
// of etcd's leader), here held and applied on demand or right before the
// next put of the prefix; and reads of that prefix that get no answer
// either (the caller cut off from etcd). Everything else is a single
// node's StaticCoordinator. For the session manager's tests of the commit
// decision (session_writeback_test).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/static_coordinator.h"

namespace summon::server {

class AnswerLosingCoordinator final : public Coordinator {
 public:
  enum class Loss {
    kNone,
    kAnswer,   // Applied; the caller hears UNAVAILABLE.
    kRequest,  // Not applied; the caller hears UNAVAILABLE.
    // The next put is held (not applied yet; the caller hears UNAVAILABLE)
    // until ApplyHeld; later puts are answered (the loss is kNone again).
    kHold,
    // As kHold, and the held put is applied right before the next put of
    // the prefix (landing between a read-back and what follows it).
    kHoldUntilNextPut,
  };

  explicit AnswerLosingCoordinator(std::string prefix)
      : prefix_(std::move(prefix)), inner_(0, {"127.0.0.1:1"}) {}

  // `puts`: how many puts of the prefix go wrong before the loss is kNone
  // again; -1: every one (kHold and kHoldUntilNextPut: one).
  void set_loss(Loss loss, int puts = -1) {
    absl::MutexLock lock(&mu_);
    loss_ = loss;
    lossy_puts_ = puts;
  }
  void set_reads_lost(bool lost) { reads_lost_ = lost; }

  absl::Status Start() override { return inner_.Start(); }
  void Stop() override { inner_.Stop(); }
  int node() const override { return inner_.node(); }
  absl::StatusOr<std::vector<Member>> Members() override {
    return inner_.Members();
  }
  absl::StatusOr<Leadership> CurrentLeader() override {
    return inner_.CurrentLeader();
  }
  bool IsLeader() const override { return inner_.IsLeader(); }
  absl::StatusOr<uint64_t> LeaderEpoch() const override {
    return inner_.LeaderEpoch();
  }
  absl::StatusOr<uint64_t> NextEpoch() override { return inner_.NextEpoch(); }
  absl::Status AwaitLeadership(absl::Duration timeout) override {
    return inner_.AwaitLeadership(timeout);
  }
  // Applies the held put now: its status (as etcd would have answered it
  // had the answer come back). FAILED_PRECONDITION when none is held.
  absl::Status ApplyHeld() {
    std::optional<HeldPut> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    if (!held.has_value()) {
      return absl::FailedPreconditionError("no put is held");
    }
    return inner_.Put(held->key, held->value, held->fence, held->mode);
  }

  absl::Status Put(absl::string_view key, absl::string_view value,
                   const Fence& fence, PutMode mode) override {
    if (!absl::StartsWith(key, prefix_)) {
      return inner_.Put(key, value, fence, mode);
    }
    Loss loss;
    std::optional<HeldPut> landing;
    {
      absl::MutexLock lock(&mu_);
      loss = loss_;
      if (loss != Loss::kNone && lossy_puts_ != 0) {
        if (lossy_puts_ > 0) --lossy_puts_;
        if (lossy_puts_ == 0 || loss == Loss::kHold ||
            loss == Loss::kHoldUntilNextPut) {
          loss_ = Loss::kNone;
        }
      } else {
        loss = Loss::kNone;
      }
      if (loss == Loss::kHold || loss == Loss::kHoldUntilNextPut) {
        held_ = HeldPut{std::string(key), std::string(value), fence, mode};
        land_before_next_put_ = loss == Loss::kHoldUntilNextPut;
      } else if (land_before_next_put_ && held_.has_value()) {
        landing.swap(held_);
        land_before_next_put_ = false;
      }
    }
    if (landing.has_value()) {
      inner_.Put(landing->key, landing->value, landing->fence, landing->mode)
          .IgnoreError();
    }
    if (loss == Loss::kNone) return inner_.Put(key, value, fence, mode);
    if (loss == Loss::kAnswer) {
      if (absl::Status put = inner_.Put(key, value, fence, mode); !put.ok()) {
        return put;
      }
    }
    return absl::UnavailableError(
        "coordinator has no quorum: txn: Deadline Exceeded");
  }
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override {
    if (reads_lost_ && absl::StartsWith(key, prefix_)) {
      return absl::UnavailableError("etcd: connection refused");
    }
    return inner_.Get(key);
  }
  absl::StatusOr<std::map<std::string, std::string>> List(
      absl::string_view prefix) override {
    return inner_.List(prefix);
  }
  absl::Status Delete(absl::string_view key, const Fence& fence) override {
    return inner_.Delete(key, fence);
  }
  absl::StatusOr<std::string> AwaitKey(absl::string_view key,
                                       absl::Duration timeout) override {
    return inner_.AwaitKey(key, timeout);
  }
  // Records of the prefix as they stand, bypassing every loss.
  absl::StatusOr<std::map<std::string, std::string>> Listed() {
    return inner_.List(prefix_);
  }

 private:
  struct HeldPut {
    std::string key;
    std::string value;
    Fence fence;
    PutMode mode;
  };

  const std::string prefix_;
  StaticCoordinator inner_;
  absl::Mutex mu_;
  Loss loss_ ABSL_GUARDED_BY(mu_) = Loss::kNone;
  int lossy_puts_ ABSL_GUARDED_BY(mu_) = -1;
  std::optional<HeldPut> held_ ABSL_GUARDED_BY(mu_);
  bool land_before_next_put_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> reads_lost_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_
