#ifndef SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_
#define SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace summon::server {

// Hands file descriptors (read-only session copies, MapSession) to clients
// on this host. gRPC cannot carry a descriptor, so an authorised RPC grants
// a one-time random token, and the client redeems it on an abstract Unix
// socket, which only processes in this host's network namespace can reach:
// it sends the token, the broker answers one byte 'K' with the descriptor
// (SCM_RIGHTS), or 'E' and a message. A grant is good once, for `ttl`, and
// only while its `valid` check (the session still OPEN) holds.
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
  // Closes the descriptors of expired grants.
  void DropExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listener_;
  const int stop_fd_;  // An eventfd: written to stop Serve().
  const std::string address_;
  const absl::Duration ttl_;
  mutable absl::Mutex mu_;
  std::map<std::string, Pending> grants_ ABSL_GUARDED_BY(mu_);
  std::thread server_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_LOCAL_FD_BROKER_H_
