#include "server/coordinator/static_coordinator.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace summon::server {

StaticCoordinator::StaticCoordinator(int node, std::vector<std::string> nodes)
    : node_(node), nodes_(std::move(nodes)) {}

absl::Status StaticCoordinator::Start() {
  if (node_ < 0 || node_ >= static_cast<int>(nodes_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", node_, " is not in a static list of ", nodes_.size()));
  }
  return absl::OkStatus();
}

void StaticCoordinator::Stop() {}

absl::StatusOr<std::vector<Coordinator::Member>> StaticCoordinator::Members() {
  std::vector<Member> members;
  for (int node = 0; node < static_cast<int>(nodes_.size()); ++node) {
    members.push_back({node, nodes_[node]});
  }
  return members;
}

absl::StatusOr<Coordinator::Leadership> StaticCoordinator::CurrentLeader() {
  absl::MutexLock lock(&mu_);
  return Leadership{0, epoch_};
}

absl::StatusOr<uint64_t> StaticCoordinator::LeaderEpoch() const {
  if (!IsLeader()) {
    return absl::UnavailableError(
        absl::StrCat("node ", node_, " does not lead (node 0 does)"));
  }
  absl::MutexLock lock(&mu_);
  return epoch_;
}

absl::StatusOr<uint64_t> StaticCoordinator::NextEpoch() {
  if (!IsLeader()) {
    return absl::UnavailableError(
        absl::StrCat("node ", node_, " does not lead (node 0 does)"));
  }
  absl::MutexLock lock(&mu_);
  return ++epoch_;
}

absl::Status StaticCoordinator::AwaitLeadership(absl::Duration) {
  if (IsLeader()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("node ", node_, " never leads a static cluster"));
}

absl::Status StaticCoordinator::CheckFence(const Fence& fence) const {
  if (fence.epoch != 0 && fence.epoch != epoch_) {
    return absl::AbortedError(absl::StrCat("epoch ", fence.epoch,
                                           " was deposed: the cluster is at "
                                           "epoch ",
                                           epoch_));
  }
  if (fence.leader && !IsLeader()) {
    return absl::AbortedError(absl::StrCat("node ", node_, " does not lead"));
  }
  return absl::OkStatus();
}

absl::Status StaticCoordinator::Put(absl::string_view key,
                                    absl::string_view value, const Fence& fence,
                                    PutMode mode) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fenced = CheckFence(fence); !fenced.ok()) return fenced;
  const auto [it, inserted] = values_.emplace(key, value);
  if (!inserted) {
    if (mode == PutMode::kCreate) {
      return absl::AlreadyExistsError(absl::StrCat(key, " is already set"));
    }
    it->second = std::string(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> StaticCoordinator::Get(
    absl::string_view key) {
  absl::MutexLock lock(&mu_);
  const auto it = values_.find(std::string(key));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::map<std::string, std::string>> StaticCoordinator::List(
    absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> found;
  for (auto it = values_.lower_bound(std::string(prefix));
       it != values_.end() && absl::StartsWith(it->first, prefix); ++it) {
    found.insert(*it);
  }
  return found;
}

absl::Status StaticCoordinator::Delete(absl::string_view key,
                                       const Fence& fence) {
  absl::MutexLock lock(&mu_);
  if (absl::Status fenced = CheckFence(fence); !fenced.ok()) return fenced;
  values_.erase(std::string(key));
  return absl::OkStatus();
}

absl::StatusOr<std::string> StaticCoordinator::AwaitKey(
    absl::string_view key, absl::Duration timeout) {
  const std::string wanted(key);
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.count(wanted) > 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        key, " was not set within ", absl::FormatDuration(timeout)));
  }
  return values_[wanted];
}

}  // namespace summon::server
