#include "tests/coordinator/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::tests {

namespace {

// A proxied connection: the accepted side and, while forwarding, the
// upstream side (-1 once cut).
struct Link {
  int client = -1;
  int upstream = -1;
};

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Copies what `from` has to `to`; false when either side ended.
bool Pump(int from, int to) {
  char buffer[64 << 10];
  const ssize_t got = read(from, buffer, sizeof(buffer));
  if (got <= 0) return false;
  for (ssize_t sent = 0; sent < got;) {
    const ssize_t wrote = write(to, buffer + sent, got - sent);
    if (wrote <= 0) return false;
    sent += wrote;
  }
  return true;
}

void CloseLink(Link& link) {
  if (link.client >= 0) close(link.client);
  if (link.upstream >= 0) close(link.upstream);
  link = Link{};
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int target_port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("proxy listen: ", why));
  }
  return std::unique_ptr<TcpProxy>(
      new TcpProxy(fd, ntohs(address.sin_port), target_port));
}

TcpProxy::TcpProxy(int listener, int port, int target_port)
    : listener_(listener), port_(port), target_port_(target_port) {
  thread_ = std::thread([this] { Loop(); });
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  thread_.join();
  close(listener_);
}

std::string TcpProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpProxy::Loop() {
  std::vector<Link> links;
  bool was_cut = false;
  while (!stop_) {
    const bool cut = cut_;
    if (cut && !was_cut) {
      // The partition begins: nothing reaches upstream any more, but the
      // client's side stays open and silent.
      for (Link& link : links) {
        if (link.upstream >= 0) close(link.upstream);
        link.upstream = -1;
      }
    } else if (!cut && was_cut) {
      // Healed: the silent connections end, so their peers reconnect.
      for (Link& link : links) CloseLink(link);
      links.clear();
    }
    was_cut = cut;
    std::vector<pollfd> fds = {{listener_, POLLIN, 0}};
    for (const Link& link : links) {
      fds.push_back({link.client, POLLIN, 0});
      fds.push_back({link.upstream, POLLIN, 0});  // -1 is ignored by poll.
    }
    if (poll(fds.data(), fds.size(), 20) <= 0) continue;
    // Only the links polled have revents; one accepted below waits for the
    // next round (reading it now could block the proxy).
    const size_t polled = links.size();
    if (fds[0].revents & POLLIN) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client >= 0) {
        const int upstream = cut ? -1 : ConnectTo(target_port_);
        if (!cut && upstream < 0) {
          close(client);  // Upstream is down: refuse, as it would.
        } else {
          links.push_back({client, upstream});
        }
      }
    }
    for (size_t i = 0; i < polled; ++i) {
      Link& link = links[i];
      const short from_client = fds[1 + 2 * i].revents;
      const short from_upstream = fds[2 + 2 * i].revents;
      bool alive = true;
      if (from_client & (POLLIN | POLLHUP | POLLERR)) {
        if (link.upstream >= 0) {
          alive = Pump(link.client, link.upstream);
        } else {
          char sink[64 << 10];  // Cut: read and drop.
          alive = read(link.client, sink, sizeof(sink)) > 0;
        }
      }
      if (alive && link.upstream >= 0 &&
          (from_upstream & (POLLIN | POLLHUP | POLLERR))) {
        alive = Pump(link.upstream, link.client);
      }
      if (!alive) CloseLink(link);
    }
    std::vector<Link> open;
    for (const Link& link : links) {
      if (link.client >= 0) open.push_back(link);
    }
    links.swap(open);
  }
  for (Link& link : links) CloseLink(link);
}

}  // namespace summon::tests
