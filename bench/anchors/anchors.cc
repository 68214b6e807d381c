// The memcpy and loopback TCP anchors, and where the anchor binary lives.
// The Gloo anchor is in gloo_anchor.cc.

#include "bench/anchors/anchors.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

absl::Status CheckRuns(const AnchorRuns& runs) {
  if (runs.bytes < 1 || runs.iters < 1 || runs.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an anchor needs bytes >= 1, iters >= 1 and warmup >= "
                     "0; got ",
                     runs.bytes, ", ", runs.iters, ", ", runs.warmup));
  }
  return absl::OkStatus();
}

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status SendAll(int fd, const uint8_t* data, int64_t bytes,
                     int64_t write_bytes) {
  for (int64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min(write_bytes, bytes - done));
    const ssize_t sent = send(fd, data + done, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return Errno("send");
    done += sent;
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, uint8_t* data, int64_t bytes) {
  for (int64_t done = 0; done < bytes;) {
    const ssize_t got = recv(fd, data + done, bytes - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Errno("recv");
    if (got == 0) return absl::UnavailableError("peer closed the connection");
    done += got;
  }
  return absl::OkStatus();
}

// A connected pair of loopback TCP sockets.
absl::Status ConnectLoopback(Fd* listener, int* client, int* server) {
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  auto* generic = reinterpret_cast<sockaddr*>(&address);
  if (bind(listener->get(), generic, length) != 0) return Errno("bind");
  if (listen(listener->get(), 1) != 0) return Errno("listen");
  if (getsockname(listener->get(), generic, &length) != 0) {
    return Errno("getsockname");
  }
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (*client < 0) return Errno("socket");
  if (connect(*client, generic, length) != 0) return Errno("connect");
  *server = accept(listener->get(), nullptr, nullptr);
  if (*server < 0) return Errno("accept");
  const int one = 1;
  // The one-byte answer must not wait for Nagle.
  setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> MemcpyMicros(const AnchorRuns& runs) {
  if (absl::Status ok = CheckRuns(runs); !ok.ok()) return ok;
  // Filled, so every page of both buffers is mapped before the first copy.
  std::vector<uint8_t> from(runs.bytes, 1);
  std::vector<uint8_t> to(runs.bytes, 2);
  std::vector<double> timed;
  for (int i = 0; i < runs.warmup + runs.iters; ++i) {
    from[static_cast<size_t>(i) % from.size()] = static_cast<uint8_t>(i);
    const Clock::time_point start = Clock::now();
    std::memcpy(to.data(), from.data(), to.size());
    const double us = MicrosecondsSince(start);
    if (i >= runs.warmup) timed.push_back(us);
  }
  // Reads the copy so that no iteration can be optimised away.
  if (to[static_cast<size_t>(runs.warmup + runs.iters - 1) % to.size()] !=
      static_cast<uint8_t>(runs.warmup + runs.iters - 1)) {
    return absl::InternalError("memcpy anchor: the copy did not arrive");
  }
  return timed;
}

absl::StatusOr<std::vector<double>> FirstTouchMicros(const AnchorRuns& runs,
                                                     bool huge_pages) {
  if (absl::Status ok = CheckRuns(runs); !ok.ok()) return ok;
  constexpr int64_t kHugePage = int64_t{2} << 20;
  const std::vector<uint8_t> from(runs.bytes, 1);
  // Mapped with a huge page of slack, so the copy can start 2 MiB aligned.
  const size_t mapped = static_cast<size_t>(runs.bytes + kHugePage);
  std::vector<double> timed;
  for (int i = 0; i < runs.warmup + runs.iters; ++i) {
    const Clock::time_point start = Clock::now();
    void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return Errno("mmap");
    const uintptr_t base = reinterpret_cast<uintptr_t>(map);
    auto* to = reinterpret_cast<uint8_t*>((base + kHugePage - 1) / kHugePage *
                                          kHugePage);
    // EINVAL where the kernel has no THP at all: the 4 KiB figure then.
    if (huge_pages) madvise(to, static_cast<size_t>(runs.bytes), MADV_HUGEPAGE);
    std::memcpy(to, from.data(), static_cast<size_t>(runs.bytes));
    const double us = MicrosecondsSince(start);
    const bool arrived = to[runs.bytes - 1] == 1;
    munmap(map, mapped);
    if (!arrived) {
      return absl::InternalError("first-touch anchor: the copy did not arrive");
    }
    if (i >= runs.warmup) timed.push_back(us);
  }
  return timed;
}

absl::StatusOr<std::vector<double>> LoopbackTcpMicros(const AnchorRuns& runs,
                                                      int64_t write_bytes) {
  if (absl::Status ok = CheckRuns(runs); !ok.ok()) return ok;
  if (write_bytes < 1) {
    return absl::InvalidArgumentError("write_bytes must be at least 1");
  }
  Fd listener(socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return Errno("socket");
  int client_fd = -1;
  int server_fd = -1;
  absl::Status connected = ConnectLoopback(&listener, &client_fd, &server_fd);
  const Fd client(client_fd);
  const Fd server(server_fd);
  if (!connected.ok()) return connected;

  const int iterations = runs.warmup + runs.iters;
  absl::Status received;
  std::thread receiver([&] {
    std::vector<uint8_t> into(runs.bytes, 0);
    const uint8_t answer = 1;
    for (int i = 0; i < iterations && received.ok(); ++i) {
      received = RecvAll(server.get(), into.data(), runs.bytes);
      if (received.ok()) received = SendAll(server.get(), &answer, 1, 1);
    }
    // Unblocks the sender's wait for an answer after a failure.
    if (!received.ok()) shutdown(server.get(), SHUT_RDWR);
  });
  const std::vector<uint8_t> from(runs.bytes, 1);
  std::vector<double> timed;
  absl::Status sent;
  for (int i = 0; i < iterations && sent.ok(); ++i) {
    const Clock::time_point start = Clock::now();
    sent = SendAll(client.get(), from.data(), runs.bytes, write_bytes);
    uint8_t answer = 0;
    if (sent.ok()) sent = RecvAll(client.get(), &answer, 1);
    if (sent.ok() && i >= runs.warmup)
      timed.push_back(MicrosecondsSince(start));
  }
  if (!sent.ok()) shutdown(client.get(), SHUT_RDWR);
  receiver.join();
  if (!received.ok()) return received;
  if (!sent.ok()) return sent;
  return timed;
}

std::string AnchorBinaryPath(const std::string& override_path) {
  if (!override_path.empty()) return override_path;
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "anchors/anchor";
  return (self.parent_path() / "anchors" / "anchor").string();
}

}  // namespace summon::bench
