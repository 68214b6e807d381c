#ifndef SUMMON_SERVER_COORDINATOR_STATIC_COORDINATOR_H_
#define SUMMON_SERVER_COORDINATOR_STATIC_COORDINATOR_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/coordinator/coordinator.h"

namespace summon::server {

// A single node, or today's fixed list of nodes (`--nodes`): node 0 always
// leads (its epochs count up from 1), every listed node is a member, and the
// records live in this process's memory. That is exact for a single node;
// a static cluster of several nodes keeps its rendezvous in node 0's
// key-value store (server/cluster/kv_store.h) as before, and is meant for
// tests and small labs (nothing survives node 0).
class StaticCoordinator final : public Coordinator {
 public:
  // The first epoch.
  static constexpr uint64_t kEpoch = 1;

  // `nodes`: HOST:PORT of every node (one entry for a single node).
  StaticCoordinator(int node, std::vector<std::string> nodes);

  absl::Status Start() override;
  void Stop() override;
  int node() const override { return node_; }
  absl::StatusOr<std::vector<Member>> Members() override;
  absl::StatusOr<Leadership> CurrentLeader() override;
  bool IsLeader() const override { return node_ == 0; }
  absl::StatusOr<uint64_t> LeaderEpoch() const override;
  absl::StatusOr<uint64_t> NextEpoch() override;
  // Node 0 leads at once; any other node never does (FAILED_PRECONDITION).
  absl::Status AwaitLeadership(absl::Duration timeout) override;
  absl::Status Put(absl::string_view key, absl::string_view value,
                   const Fence& fence, PutMode mode) override;
  absl::StatusOr<std::optional<std::string>> Get(
      absl::string_view key) override;
  absl::StatusOr<std::map<std::string, std::string>> List(
      absl::string_view prefix) override;
  absl::Status Delete(absl::string_view key, const Fence& fence) override;
  absl::StatusOr<std::string> AwaitKey(absl::string_view key,
                                       absl::Duration timeout) override;

 private:
  absl::Status CheckFence(const Fence& fence) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int node_;
  const std::vector<std::string> nodes_;
  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = kEpoch;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_STATIC_COORDINATOR_H_
