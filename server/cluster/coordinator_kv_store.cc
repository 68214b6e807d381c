#include "server/cluster/coordinator_kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace summon::server {

absl::Status CoordinatorKvStore::Set(absl::string_view key,
                                     absl::string_view value) {
  return coordinator_.Put(coordinator_keys::Rendezvous(epoch_, key), value,
                          Coordinator::Fence{epoch_, /*leader=*/false},
                          Coordinator::PutMode::kOverwrite);
}

absl::StatusOr<std::string> CoordinatorKvStore::Get(absl::string_view key,
                                                    absl::Duration timeout) {
  const std::string full = coordinator_keys::Rendezvous(epoch_, key);
  if (timeout <= absl::ZeroDuration()) {
    absl::StatusOr<std::optional<std::string>> value = coordinator_.Get(full);
    if (!value.ok()) return value.status();
    if (!value->has_value()) {
      return absl::NotFoundError(absl::StrCat(key, " is not set"));
    }
    return **value;
  }
  return coordinator_.AwaitKey(full, timeout);
}

absl::Status CoordinatorKvStore::Wait(const std::vector<std::string>& keys,
                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<std::string> value =
        Get(keys[i], std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (absl::IsDeadlineExceeded(value.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous keys missing after ", absl::FormatDuration(timeout), ": ",
          absl::StrJoin(keys.begin() + i, keys.end(), ", ")));
    }
    if (!value.ok()) return value.status();
  }
  return absl::OkStatus();
}

}  // namespace summon::server
