#include "server/cluster/rendezvous_store.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gloo/common/error.h"

namespace summon::server {
namespace {

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw gloo::IoException(status.ToString());
}

}  // namespace

RendezvousStore::RendezvousStore(KvStore& store, std::string prefix,
                                 absl::Duration timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

void RendezvousStore::set(const std::string& key,
                          const std::vector<char>& data) {
  ThrowIfError(store_.Set(absl::StrCat(prefix_, key),
                          absl::string_view(data.data(), data.size())));
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  absl::StatusOr<std::string> value =
      store_.Get(absl::StrCat(prefix_, key), timeout_);
  ThrowIfError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void RendezvousStore::wait(const std::vector<std::string>& keys) {
  ThrowIfError(store_.Wait(Prefixed(keys), timeout_));
}

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  ThrowIfError(store_.Wait(Prefixed(keys), absl::FromChrono(timeout)));
}

std::vector<std::string> RendezvousStore::Prefixed(
    const std::vector<std::string>& keys) const {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) {
    prefixed.push_back(absl::StrCat(prefix_, key));
  }
  return prefixed;
}

}  // namespace summon::server
