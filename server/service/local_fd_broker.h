#ifndef SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_
#define SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace summon::server {

// True for gRPC's peer of a call from this host: loopback, a Unix socket or
// an in-process channel. A descriptor is only of use on this host, and the
// broker's abstract socket is only reachable from it anyway: callers refuse
// (or fall back) early with a clear reason.
bool IsLocalPeer(absl::string_view peer);

// Hands file descriptors (read-only session copies, MapSession) to clients
// on this host. gRPC cannot carry a descriptor, so an authorised RPC grants
// a one-time random token, and the client redeems it on an abstract Unix
// socket, which only processes in this host's network namespace can reach:
// it sends the token, the broker answers one byte 'K' with the descriptor
// (SCM_RIGHTS), or 'E' and a message. A grant is good once, for `ttl`, and
// only while its `valid` check (the session still OPEN) holds.
//
// The other way (ReadSlices into a caller's shared-memory buffer): Expect
// grants a token that the client sends with its descriptor attached; Await
// hands that descriptor to the RPC waiting for it. The token is only ever
// sent to the authorised caller, so only it can hand a buffer to its call.
class LocalFdBroker {
 public:
  static constexpr int kTokenBytes = 32;

  // Binds "@summon-<pid>-<random>" and starts serving.
  static absl::StatusOr<std::unique_ptr<LocalFdBroker>> Start(
      absl::Duration ttl = absl::Seconds(10));
  LocalFdBroker(const LocalFdBroker&) = delete;
  LocalFdBroker& operator=(const LocalFdBroker&) = delete;
  // Stops serving; closes the descriptors of unredeemed grants.
  ~LocalFdBroker();

  // The socket's name: '@' stands for sun_path's leading NUL byte.
  const std::string& address() const { return address_; }
  absl::Duration ttl() const { return ttl_; }

  // Takes ownership of `fd`; returns the token that redeems it.
  absl::StatusOr<std::string> Grant(int fd, std::function<bool()> valid);
  // Grants not yet redeemed or expired (for tests).
  int pending() const;

  // A token for a descriptor the client will send; Await or Forget it.
  absl::StatusOr<std::string> Expect();
  // The descriptor sent with `token` (the caller's to close), waiting until
  // `deadline` or until `cancelled()` (asked every 50 ms): DEADLINE_EXCEEDED
  // or CANCELLED then. The token is forgotten either way.
  absl::StatusOr<int> Await(const std::string& token, absl::Time deadline,
                            const std::function<bool()>& cancelled);
  // Drops an expected token (and a descriptor already sent with it).
  void Forget(const std::string& token);

 private:
  struct Pending {
    int fd = -1;
    absl::Time deadline;
    std::function<bool()> valid;
  };

  LocalFdBroker(int listener, int stop_fd, std::string address,
                absl::Duration ttl);
  void Serve();
  void Answer(int connection);
  // A descriptor sent with an expected token: 'K', or 'E' and why not.
  void Accept(int connection, const std::string& token, int fd);
  // Closes the descriptors of expired grants.
  void DropExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listener_;
  const int stop_fd_;  // An eventfd: written to stop Serve().
  const std::string address_;
  const absl::Duration ttl_;
  mutable absl::Mutex mu_;
  std::map<std::string, Pending> grants_ ABSL_GUARDED_BY(mu_);
  // Expect's tokens: -1 until the client's descriptor arrives.
  std::map<std::string, int> expected_ ABSL_GUARDED_BY(mu_);
  std::thread server_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_
