#ifndef SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_
#define SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_

// A coordinator whose writes of one key prefix go wrong the two ways an etcd
// transaction can when its answer does not come back (the caller paused
// past the call's deadline, etcd slow): applied, with the answer lost; or
// never applied; and reads of that prefix that get no answer either (the
// caller cut off from etcd). Everything else is a single node's
// StaticCoordinator. For
// the session manager's tests of the commit decision (session_writeback).

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "server/coordinator/static_coordinator.h"

namespace summon::server {

class AnswerLosingCoordinator final : public Coordinator {
 public:
  enum class Loss {
    kNone,
    kAnswer,   // Applied; the caller hears UNAVAILABLE.
    kRequest,  // Not applied; the caller hears UNAVAILABLE.
  };

  explicit AnswerLosingCoordinator(std::string prefix)
      : prefix_(std::move(prefix)), inner_(0, {"127.0.0.1:1"}) {}

  void set_loss(Loss loss) { loss_ = loss; }
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
  absl::Status Put(absl::string_view key, absl::string_view value,
                   const Fence& fence, PutMode mode) override {
    if (loss_ == Loss::kNone || !absl::StartsWith(key, prefix_)) {
      return inner_.Put(key, value, fence, mode);
    }
    if (loss_ == Loss::kAnswer) {
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

 private:
  const std::string prefix_;
  StaticCoordinator inner_;
  std::atomic<Loss> loss_{Loss::kNone};
  std::atomic<bool> reads_lost_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_ANSWER_LOSING_COORDINATOR_H_
