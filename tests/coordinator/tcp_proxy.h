#ifndef SUMMON_TESTS_COORDINATOR_TCP_PROXY_H_
#define SUMMON_TESTS_COORDINATOR_TCP_PROXY_H_

// A TCP proxy on 127.0.0.1 in front of one address, which a test can cut:
// a network partition on one machine without root. Cut, every connection
// (open or new) is kept open but nothing crosses it, as when packets are
// dropped: the peer's calls hang until their deadlines instead of failing
// at once. Restored, the cut connections are closed (their peers reconnect)
// and new ones are forwarded again.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace summon::tests {

class TcpProxy {
 public:
  // Listens on a free loopback port and forwards to 127.0.0.1:target_port.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int target_port);
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;
  ~TcpProxy();  // Closes everything.

  int port() const { return port_; }
  std::string address() const;
  void Cut() { cut_ = true; }
  void Restore() { cut_ = false; }

 private:
  TcpProxy(int listener, int port, int target_port);
  void Loop();

  const int listener_;
  const int port_;
  const int target_port_;
  std::atomic<bool> cut_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_TCP_PROXY_H_
