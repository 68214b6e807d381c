#include "tests/cluster/daemon_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/lib/summon_client.h"
#include "grpcpp/client_context.h"

namespace summon::tests {

namespace health = ::grpc::health::v1;

namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

}  // namespace

std::string RunfilePath(absl::string_view path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "summon", "/", path);
}

absl::StatusOr<std::vector<int>> PickFreePorts(int count) {
  std::vector<int> sockets;
  std::vector<int> ports;
  absl::Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      status =
          absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
      break;
    }
    sockets.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      status = absl::UnavailableError(
          absl::StrCat("cannot bind a free port: ", strerror(errno)));
      break;
    }
    ports.push_back(ntohs(address.sin_port));
  }
  for (int fd : sockets) close(fd);
  if (!status.ok()) return status;
  return ports;
}

absl::StatusOr<health::HealthCheckResponse::ServingStatus> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = health::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  health::HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&context, health::HealthCheckRequest(), &response);
  if (!status.ok()) return client::FromGrpcStatus(status);
  return response.status();
}

absl::Status WaitServing(
    const std::vector<std::string>& addresses, absl::Duration timeout,
    const std::function<std::shared_ptr<grpc::Channel>(const std::string&)>&
        channel_to,
    const std::function<absl::Status()>& check_alive) {
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t node = 0; node < addresses.size(); ++node) {
    while (true) {
      if (absl::Status alive = check_alive(); !alive.ok()) return alive;
      absl::StatusOr<health::HealthCheckResponse::ServingStatus> status =
          CheckHealth(channel_to(addresses[node]));
      if (status.ok() && *status == health::HealthCheckResponse::SERVING) {
        break;
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "node ", node, " is not SERVING after ",
            absl::FormatDuration(timeout), ": ",
            status.ok()
                ? health::HealthCheckResponse::ServingStatus_Name(*status)
                : status.status().ToString()));
      }
      absl::SleepFor(kPollInterval);
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::tests
