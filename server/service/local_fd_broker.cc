#include "server/service/local_fd_broker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "memory/fd_passing.h"

namespace summon::server {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The reply to a client: one status byte, the descriptor with 'K'.
void Reply(int connection, char code, absl::string_view message, int fd) {
  std::string body(1, code);
  body.append(message.data(), message.size());
  // A client that went away loses its grant: nothing to do about it.
  (void)memory::SendWithDescriptor(connection, body, fd);
}

// Receives the token; a descriptor sent with it lands in `fd` (the first
// one; any others are closed). False when the client sent too little.
bool ReceiveToken(int connection, std::string& token, int& fd) {
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = memory::ReceiveWithDescriptor(
        connection, token.data() + got, token.size() - got, &fd);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool IsLocalPeer(absl::string_view peer) {
  for (absl::string_view prefix :
       {"unix:", "unix-abstract:", "ipv4:127.", "ipv6:[::1]", "ipv6:%5B::1%5D",
        "ipv6:[::ffff:127.", "ipv6:%5B::ffff:127.", "inproc"}) {
    if (absl::StartsWith(peer, prefix)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<LocalFdBroker>> LocalFdBroker::Start(
    absl::Duration ttl) {
  uint8_t random[8];
  if (getrandom(random, sizeof(random), 0) != sizeof(random)) {
    return Errno("getrandom");
  }
  const std::string name =
      absl::StrCat("summon-", getpid(), "-",
                   absl::BytesToHexString(absl::string_view(
                       reinterpret_cast<const char*>(random), sizeof(random))));
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return Errno("socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract namespace: sun_path starts with NUL; no file, no leftovers.
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 64) != 0) {
    absl::Status error = Errno(absl::StrCat("binding @", name));
    close(listener);
    return error;
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    absl::Status error = Errno("eventfd");
    close(listener);
    return error;
  }
  return std::unique_ptr<LocalFdBroker>(
      new LocalFdBroker(listener, stop_fd, absl::StrCat("@", name), ttl));
}

LocalFdBroker::LocalFdBroker(int listener, int stop_fd, std::string address,
                             absl::Duration ttl)
    : listener_(listener),
      stop_fd_(stop_fd),
      address_(std::move(address)),
      ttl_(ttl),
      server_([this] { Serve(); }) {}

LocalFdBroker::~LocalFdBroker() {
  const uint64_t one = 1;
  // An eventfd write fails only when its counter would overflow: never
  // for one write from zero.
  [[maybe_unused]] const ssize_t written = write(stop_fd_, &one, sizeof(one));
  server_.join();
  close(listener_);
  close(stop_fd_);
  absl::MutexLock lock(&mu_);
  for (auto& [token, grant] : grants_) close(grant.fd);
  for (auto& [token, fd] : expected_) {
    if (fd >= 0) close(fd);
  }
}

absl::StatusOr<std::string> LocalFdBroker::Grant(int fd,
                                                 std::function<bool()> valid) {
  std::string token(kTokenBytes, '\0');
  if (getrandom(token.data(), token.size(), 0) !=
      static_cast<ssize_t>(token.size())) {
    absl::Status error = Errno("getrandom");
    close(fd);
    return error;
  }
  absl::MutexLock lock(&mu_);
  DropExpired();
  grants_[token] = Pending{fd, absl::Now() + ttl_, std::move(valid)};
  return token;
}

absl::StatusOr<std::string> LocalFdBroker::Expect() {
  std::string token(kTokenBytes, '\0');
  if (getrandom(token.data(), token.size(), 0) !=
      static_cast<ssize_t>(token.size())) {
    return Errno("getrandom");
  }
  absl::MutexLock lock(&mu_);
  expected_[token] = -1;
  return token;
}

absl::StatusOr<int> LocalFdBroker::Await(
    const std::string& token, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto arrived = [this, &token]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        auto it = expected_.find(token);
        return it == expected_.end() || it->second >= 0;
      };
      mu_.AwaitWithDeadline(
          absl::Condition(&arrived),
          std::min(deadline, absl::Now() + absl::Milliseconds(50)));
      auto it = expected_.find(token);
      if (it == expected_.end()) {
        return absl::FailedPreconditionError("the buffer token was dropped");
      }
      if (it->second >= 0) {
        const int fd = it->second;
        expected_.erase(it);
        return fd;
      }
      if (absl::Now() >= deadline) {
        expected_.erase(it);
        return absl::DeadlineExceededError(absl::StrCat(
            "no buffer was handed over at ", address_, " in time"));
      }
    }
    if (cancelled && cancelled()) {
      Forget(token);
      return absl::CancelledError("the call was cancelled");
    }
  }
}

void LocalFdBroker::Forget(const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = expected_.find(token);
  if (it == expected_.end()) return;
  if (it->second >= 0) close(it->second);
  expected_.erase(it);
}

int LocalFdBroker::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(grants_.size());
}

void LocalFdBroker::DropExpired() {
  const absl::Time now = absl::Now();
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second.deadline <= now) {
      close(it->second.fd);
      it = grants_.erase(it);
    } else {
      ++it;
    }
  }
}

void LocalFdBroker::Serve() {
  pollfd fds[2] = {{listener_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int connection = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void LocalFdBroker::Answer(int connection) {
  // One connection at a time: a client that does not send its token
  // promptly is dropped rather than holding the others up.
  const timeval timeout{1, 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string token(kTokenBytes, '\0');
  int sent = -1;  // A descriptor the client sent with its token.
  if (!ReceiveToken(connection, token, sent)) {
    if (sent >= 0) close(sent);
    return Reply(connection, 'E', "no token", -1);
  }
  bool expected = false;
  {
    absl::MutexLock lock(&mu_);
    expected = expected_.count(token) != 0;
  }
  if (expected) return Accept(connection, token, sent);
  if (sent >= 0) close(sent);  // Map tokens take nothing.
  Pending grant;
  {
    absl::MutexLock lock(&mu_);
    DropExpired();
    auto it = grants_.find(token);
    if (it == grants_.end()) {
      return Reply(connection, 'E',
                   "unknown, used or expired token; ask MapSession again", -1);
    }
    grant = std::move(it->second);
    grants_.erase(it);
  }
  // Asked outside the lock: it takes the session manager's.
  if (grant.valid && !grant.valid()) {
    Reply(connection, 'E', "the session is no longer open", -1);
  } else {
    Reply(connection, 'K', "", grant.fd);
  }
  close(grant.fd);
}

void LocalFdBroker::Accept(int connection, const std::string& token, int fd) {
  if (fd < 0) {
    return Reply(connection, 'E', "no descriptor came with the buffer token",
                 -1);
  }
  bool taken = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = expected_.find(token);
    if (it != expected_.end() && it->second < 0) {
      it->second = fd;
      taken = true;
    }
  }
  if (!taken) {
    close(fd);
    return Reply(connection, 'E', "unknown, used or expired buffer token", -1);
  }
  Reply(connection, 'K', "", -1);
}

}  // namespace summon::server
