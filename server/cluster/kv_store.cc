#include "server/cluster/kv_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "server/rpc/status_conversion.h"

namespace summon::server {
namespace {

namespace pb = ::summon::v1;

// The wire carries waits in whole milliseconds (uint32); longer waits are
// clamped (about 49 days).
uint32_t ToWireMilliseconds(absl::Duration timeout) {
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  return static_cast<uint32_t>(
      std::clamp<int64_t>(ms, 0, std::numeric_limits<uint32_t>::max()));
}

// The time a served wait may take: the request's timeout_ms, cut short by the
// caller's deadline so the answer still reaches it. 0 stays 0 (look once).
absl::Duration ServedWaitTimeout(const grpc::ServerContext& context,
                                 uint32_t timeout_ms) {
  if (timeout_ms == 0) return absl::ZeroDuration();
  const absl::Duration until_deadline =
      absl::FromChrono(context.deadline()) - absl::Now();
  return std::min(absl::Milliseconds(timeout_ms),
                  std::max(until_deadline, absl::Nanoseconds(1)));
}

// Client context of a call to the leader: waits for the channel to come up
// (the leader may start after this node) until `deadline`.
void PrepareCall(grpc::ClientContext& context, absl::Time deadline) {
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(deadline));
}

absl::Status FromLeader(const grpc::Status& status) {
  const absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(
      converted.code(),
      absl::StrCat("rendezvous store at the leader: ", converted.message()));
}

}  // namespace

// LocalKvStore ---------------------------------------------------------------

absl::Status LocalKvStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("rendezvous store is closed");
  values_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalKvStore::Get(absl::string_view key,
                                              absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const std::vector<std::string> keys = {std::string(key)};
  absl::Status present = AwaitKeys(keys, timeout);
  if (absl::IsDeadlineExceeded(present) && timeout <= absl::ZeroDuration()) {
    return absl::NotFoundError(absl::StrCat("no key \"", key, "\""));
  }
  if (!present.ok()) return present;
  return values_.at(keys[0]);
}

absl::Status LocalKvStore::Wait(const std::vector<std::string>& keys,
                                absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return AwaitKeys(keys, timeout);
}

absl::Status LocalKvStore::AwaitKeys(const std::vector<std::string>& keys,
                                     absl::Duration timeout) {
  const auto present_or_closed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ ||
           std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
             return values_.count(key) > 0;
           });
  };
  // The mutex re-evaluates the condition whenever it is released, so every
  // Set wakes exactly the waiters whose keys are now all present.
  mu_.AwaitWithTimeout(absl::Condition(&present_or_closed), timeout);
  if (closed_) return absl::UnavailableError("rendezvous store is closed");
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (values_.count(key) == 0) missing.push_back(key);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "rendezvous keys not set within ", absl::FormatDuration(timeout), ": ",
      absl::StrJoin(missing, ", ")));
}

int LocalKvStore::ErasePrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  const std::string first(prefix);
  auto begin = values_.lower_bound(first);
  auto end = begin;
  int erased = 0;
  while (end != values_.end() &&
         absl::string_view(end->first).substr(0, prefix.size()) == prefix) {
    ++end;
    ++erased;
  }
  values_.erase(begin, end);
  return erased;
}

void LocalKvStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

// RemoteKvStore --------------------------------------------------------------

RemoteKvStore::RemoteKvStore(std::shared_ptr<grpc::Channel> leader,
                             absl::Duration rpc_timeout)
    : stub_(pb::Peer::NewStub(std::move(leader))), rpc_timeout_(rpc_timeout) {}

absl::Status RemoteKvStore::Set(absl::string_view key,
                                absl::string_view value) {
  grpc::ClientContext context;
  PrepareCall(context, absl::Now() + rpc_timeout_);
  pb::StoreSetRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  pb::StoreSetResponse response;
  return FromLeader(stub_->StoreSet(&context, request, &response));
}

absl::StatusOr<std::string> RemoteKvStore::Get(absl::string_view key,
                                               absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareCall(context, absl::Now() + std::max(timeout, absl::ZeroDuration()) +
                           rpc_timeout_);
  pb::StoreGetRequest request;
  request.set_key(std::string(key));
  request.set_timeout_ms(ToWireMilliseconds(timeout));
  pb::StoreGetResponse response;
  if (absl::Status status =
          FromLeader(stub_->StoreGet(&context, request, &response));
      !status.ok()) {
    return status;
  }
  return std::move(*response.mutable_value());
}

absl::Status RemoteKvStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout) {
  grpc::ClientContext context;
  PrepareCall(context, absl::Now() + std::max(timeout, absl::ZeroDuration()) +
                           rpc_timeout_);
  pb::StoreWaitRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(ToWireMilliseconds(timeout));
  pb::StoreWaitResponse response;
  return FromLeader(stub_->StoreWait(&context, request, &response));
}

// KvStoreService -------------------------------------------------------------

grpc::Status KvStoreService::StoreSet(grpc::ServerContext* /*context*/,
                                      const pb::StoreSetRequest* request,
                                      pb::StoreSetResponse* /*response*/) {
  return ToGrpcStatus(store_.Set(request->key(), request->value()));
}

grpc::Status KvStoreService::StoreGet(grpc::ServerContext* context,
                                      const pb::StoreGetRequest* request,
                                      pb::StoreGetResponse* response) {
  absl::StatusOr<std::string> value = store_.Get(
      request->key(), ServedWaitTimeout(*context, request->timeout_ms()));
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::StoreWait(grpc::ServerContext* context,
                                       const pb::StoreWaitRequest* request,
                                       pb::StoreWaitResponse* /*response*/) {
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  return ToGrpcStatus(
      store_.Wait(keys, ServedWaitTimeout(*context, request->timeout_ms())));
}

}  // namespace summon::server
