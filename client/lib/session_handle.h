#ifndef SUMMON_CLIENT_LIB_SESSION_HANDLE_H_
#define SUMMON_CLIENT_LIB_SESSION_HANDLE_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/lib/summon_client.h"
#include "summon/v1/summon.pb.h"

namespace summon::client {

// Owns one open session (SummonClient::Open): a background thread renews its
// lease every lease/3, and destruction closes it with writeback (a read-only
// session simply closes) unless Abort, Release or a successful Close came
// first. A writeback refused at destruction (e.g. ABORTED under R7) leaves
// the session to its lease, which then aborts it. Methods other than
// renew_status() are for one thread at a time.
class Session {
 public:
  // Starts renewing `opened`, a session just opened through `client`.
  Session(SummonClient client, v1::Session opened);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  const std::string& id() const { return opened_.id(); }
  // The session as OpenSession returned it (options with defaults filled in,
  // tensors, generations).
  const v1::Session& opened() const { return opened_; }
  const SummonClient& client() const { return client_; }

  // Closes with writeback; `force` writes back even when a unit's generation
  // moved (R7). On ABORTED the session stays open and renewed, so the caller
  // may retry with force or Abort. NOT_FOUND (closed or expired elsewhere)
  // also ends the handle's ownership.
  absl::StatusOr<v1::CloseSessionResponse> Close(bool force = false);
  // Closes without writeback; when that fails, destruction retries the
  // abort instead of writing back.
  absl::Status Abort();
  // Stops renewing and gives up ownership without closing: the session
  // lives on until someone closes it or its lease runs out. Returns the id.
  std::string Release();

  // OK, or the error of the latest failed lease renewal.
  absl::Status renew_status() const;

 private:
  void RenewUntilStopped(absl::Duration interval);
  void StopRenewing();
  // Ends ownership when `status` says the session no longer needs a close.
  void EndIfClosed(const absl::Status& status);
  // FAILED_PRECONDITION once the handle closed or released the session.
  absl::Status CheckOwned() const;

  const SummonClient client_;
  const v1::Session opened_;
  bool owned_ = true;
  // Cleared by Abort: destruction then aborts instead of closing.
  bool writeback_ = true;

  mutable absl::Mutex mutex_;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status renew_status_ ABSL_GUARDED_BY(mutex_);
  std::thread renewer_;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_SESSION_HANDLE_H_
