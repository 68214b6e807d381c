#include "server/coordinator/coordinator.h"

#include "absl/strings/str_cat.h"

namespace summon::server {

namespace coordinator_keys {

std::string Rendezvous(uint64_t epoch, absl::string_view key) {
  return absl::StrCat("rdzv/", epoch, "/", key);
}

std::string Model(absl::string_view name) {
  return absl::StrCat(kModelsPrefix, name);
}

std::string Commit(absl::string_view record) {
  return absl::StrCat(kCommitsPrefix, record);
}

}  // namespace coordinator_keys

absl::Status RecordCommitDecision(Coordinator& coordinator,
                                  absl::string_view record,
                                  absl::string_view decision, uint64_t epoch) {
  return coordinator.Put(coordinator_keys::Commit(record), decision,
                         Coordinator::Fence{epoch, /*leader=*/true},
                         Coordinator::PutMode::kCreate);
}

absl::StatusOr<std::optional<std::string>> CommitDecision(
    Coordinator& coordinator, absl::string_view record) {
  return coordinator.Get(coordinator_keys::Commit(record));
}

}  // namespace summon::server
