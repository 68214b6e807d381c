// Runs the summond binary as a child process.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

extern char** environ;

namespace {

std::string SummondPath() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/summon/server/summond");
}

pid_t Spawn(std::vector<std::string> args) {
  args.insert(args.begin(), SummondPath());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(error, 0) << "cannot start " << argv[0];
  return pid;
}

// The child's exit code, or -1 when it did not exit normally within 20 s (it
// is killed then).
int WaitForExit(pid_t pid) {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// The port summond wrote, or 0 when the file did not appear within 20 s.
int ReadPortFile(const std::string& path) {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

bool IsServing(int port) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  return status.ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

class SummondTest : public testing::TestWithParam<int> {};

TEST_P(SummondTest, WritesPortFileServesAndExitsCleanlyOnSignal) {
  const int signal_number = GetParam();
  const std::string port_file =
      absl::StrCat(testing::TempDir(), "/summond-", signal_number, ".port");
  std::remove(port_file.c_str());
  // Both spellings docs/api.md section 2 allows: "--flag value" and "--flag=value".
  const pid_t pid =
      Spawn({"--insecure-local", "--listen", "127.0.0.1:0", "--port-file",
             port_file, "--local-ranks=4", "--log-level=warn"});
  ASSERT_GT(pid, 0);

  const int port = ReadPortFile(port_file);
  EXPECT_GT(port, 0);
  EXPECT_TRUE(port > 0 && IsServing(port)) << "port " << port;

  ASSERT_EQ(kill(pid, signal_number), 0);
  EXPECT_EQ(WaitForExit(pid), 0);
}

INSTANTIATE_TEST_SUITE_P(StopSignals, SummondTest,
                         testing::Values(SIGTERM, SIGINT));

TEST(SummondFlagsTest, BadFlagValuesExitWithInvalidArgument) {
  const int kInvalidArgument = 3;
  EXPECT_EQ(WaitForExit(Spawn({"--log-level=loud"})), kInvalidArgument);
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--local-ranks=0"})),
            kInvalidArgument);
  EXPECT_EQ(
      WaitForExit(Spawn({"--insecure-local", "--listen=", "--unix-socket="})),
      kInvalidArgument);
  EXPECT_EQ(WaitForExit(Spawn({"stray-argument"})), kInvalidArgument);
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--device=tpu"})),
            kInvalidArgument);
  // NCCL exchanges session copies in GPU memory: only with --device cuda.
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--gather-transport=nccl"})),
            kInvalidArgument);
  EXPECT_EQ(
      WaitForExit(Spawn({"--insecure-local", "--gather-transport=carrier"})),
      kInvalidArgument);
  EXPECT_EQ(
      WaitForExit(Spawn({"--insecure-local", "--coordinator=zk://a:1/c"})),
      kInvalidArgument);
  EXPECT_EQ(
      WaitForExit(Spawn({"--insecure-local", "--coordinator=etcd://a:0/c"})),
      kInvalidArgument);
}

TEST(SummondFlagsTest, ValidEtcdCoordinatorIsRefusedUntilWired) {
  const int kFailedPrecondition = 9;
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local",
                               "--coordinator=etcd://127.0.0.1:2379/lab"})),
            kFailedPrecondition);
}

TEST(SummondFlagsTest, RefusesToServeUnsafely) {
  const int kInvalidArgument = 3;
  // Neither TLS nor --insecure-local.
  EXPECT_EQ(WaitForExit(Spawn({"--listen=127.0.0.1:0"})), kInvalidArgument);
  // --insecure-local anywhere but loopback.
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--listen=0.0.0.0:0"})),
            kInvalidArgument);
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--listen=192.0.2.1:1"})),
            kInvalidArgument);
  // Tokens in the clear.
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local", "--listen=127.0.0.1:0",
                               "--tokens=/dev/null"})),
            kInvalidArgument);
}

TEST(SummondFlagsTest, TakenAddressExitsWithUnavailable) {
  const int kUnavailable = 14;
  // A port this test holds.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  EXPECT_EQ(WaitForExit(Spawn(
                {"--insecure-local", absl::StrCat("--listen=127.0.0.1:",
                                                  ntohs(address.sin_port))})),
            kUnavailable);
  close(fd);
}

}  // namespace
