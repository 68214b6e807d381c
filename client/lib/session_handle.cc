#include "client/lib/session_handle.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::client {
namespace {

// The daemon's lease when SessionOptions.lease_seconds is unset or 0.
constexpr uint32_t kDefaultLeaseSeconds = 60;

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> SummonClient::Open(
    const std::string& model, const v1::SessionOptions& options) const {
  absl::StatusOr<v1::Session> opened = OpenSession(model, options);
  if (!opened.ok()) return opened.status();
  return std::make_unique<Session>(*this, *std::move(opened));
}

Session::Session(SummonClient client, v1::Session opened)
    : client_(std::move(client)), opened_(std::move(opened)) {
  const uint32_t lease_seconds = opened_.options().lease_seconds() > 0
                                     ? opened_.options().lease_seconds()
                                     : kDefaultLeaseSeconds;
  renewer_ = std::thread(&Session::RenewUntilStopped, this,
                         absl::Seconds(lease_seconds) / 3);
}

Session::~Session() {
  if (owned_) {
    if (writeback_) {
      Close().IgnoreError();
    } else {
      Abort().IgnoreError();
    }
  }
  StopRenewing();
}

void Session::RenewUntilStopped(absl::Duration interval) {
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      if (mutex_.AwaitWithTimeout(absl::Condition(&stop_), interval)) return;
    }
    const absl::Status renewed = client_.RenewSession(id()).status();
    absl::MutexLock lock(&mutex_);
    renew_status_ = renewed;
  }
}

void Session::StopRenewing() {
  {
    absl::MutexLock lock(&mutex_);
    stop_ = true;
  }
  if (renewer_.joinable()) renewer_.join();
}

void Session::EndIfClosed(const absl::Status& status) {
  if (status.ok() || absl::IsNotFound(status)) {
    owned_ = false;
    StopRenewing();
  }
}

absl::Status Session::CheckOwned() const {
  if (owned_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("session ", id(), " is no longer owned by this handle"));
}

absl::StatusOr<v1::CloseSessionResponse> Session::Close(bool force) {
  if (absl::Status owned = CheckOwned(); !owned.ok()) return owned;
  absl::StatusOr<v1::CloseSessionResponse> closed =
      client_.CloseSession(id(), /*abort=*/false, force);
  EndIfClosed(closed.status());
  return closed;
}

absl::Status Session::Abort() {
  if (absl::Status owned = CheckOwned(); !owned.ok()) return owned;
  // Whatever happens now, this handle never writes the session back.
  writeback_ = false;
  const absl::Status aborted =
      client_.CloseSession(id(), /*abort=*/true).status();
  EndIfClosed(aborted);
  return aborted;
}

std::string Session::Release() {
  owned_ = false;
  StopRenewing();
  return id();
}

absl::Status Session::renew_status() const {
  absl::MutexLock lock(&mutex_);
  return renew_status_;
}

}  // namespace summon::client
