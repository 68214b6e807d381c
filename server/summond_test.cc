// Runs the summond binary as a child process.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
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

// Starts summond with `args`; its stdout and stderr go to `stderr_path`
// when given.
pid_t Spawn(std::vector<std::string> args,
            const std::string& stderr_path = "") {
  args.insert(args.begin(), SummondPath());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // spdlog's default logger writes to stdout: both into the one file.
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
  }
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// summond's exit code for `args`, and what it logged.
std::pair<int, std::string> RunToExit(std::vector<std::string> args) {
  const std::string log = absl::StrCat(testing::TempDir(), "/summond.stderr");
  const int code = WaitForExit(Spawn(std::move(args), log));
  return {code, ReadFile(log)};
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

TEST(SummondFlagsTest, EtcdCoordinatorNeedsAClusterAndALongEnoughLease) {
  const int kInvalidArgument = 3;
  // A single node needs no coordinator.
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local",
                               "--coordinator=etcd://127.0.0.1:2379/lab"})),
            kInvalidArgument);
  // etcd grants no lease under 2 s.
  EXPECT_EQ(WaitForExit(Spawn({"--insecure-local",
                               "--nodes=127.0.0.1:1,127.0.0.1:2",
                               "--coordinator=etcd://127.0.0.1:2379/lab",
                               "--coordinator-lease-ttl=1s"})),
            kInvalidArgument);
}

// A cluster names what it runs on; a single node needs nothing.
TEST(SummondFlagsTest, AClusterNamesItsCoordinator) {
  const int kInvalidArgument = 3;
  const auto [code, log] =
      RunToExit({"--insecure-local", "--nodes=127.0.0.1:1,127.0.0.1:2"});
  EXPECT_EQ(code, kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      log,
      "--nodes names 2 nodes but no --coordinator: give --coordinator "
      "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER (etcd elects the leader, the "
      "cluster outlives any node) or --coordinator static (the fixed list, "
      "node 0 leads: for tests and small labs)"))
      << log;
  // Named static, the list passes that check (and meets the next one).
  const auto [static_code, static_log] = RunToExit(
      {"--insecure-local", "--nodes=127.0.0.1:1,127.0.0.1:2",
       "--coordinator=static", "--coordinator-ca=/etc/hostname"});
  EXPECT_EQ(static_code, kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      static_log,
      "--coordinator-ca is for an etcd coordinator: give --coordinator "
      "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER"))
      << static_log;
}

// TLS and authentication to etcd: each bad flag named, no file echoed.
TEST(SummondFlagsTest, EtcdAccessFlagsNameTheFlagNotTheContents) {
  const int kInvalidArgument = 3;
  const std::string secret = absl::StrCat(testing::TempDir(), "/secret");
  std::ofstream(secret) << "hunter2-not-a-certificate\n";
  const std::string blank = absl::StrCat(testing::TempDir(), "/blank");
  std::ofstream(blank) << "\nsecond line\n";
  const std::vector<std::string> etcd = {
      "--insecure-local", "--nodes=127.0.0.1:1,127.0.0.1:2",
      "--coordinator=etcd://127.0.0.1:2379/lab"};
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--coordinator-cert=" + secret},
       "--coordinator-cert needs --coordinator-key"},
      {{"--coordinator-key=" + secret},
       "--coordinator-key needs --coordinator-cert"},
      {{"--coordinator-user=summon"},
       "--coordinator-user needs --coordinator-password-file"},
      {{"--coordinator-password-file=" + secret},
       "--coordinator-password-file needs --coordinator-user"},
      {{"--coordinator-ca=/nonexistent/ca.crt"},
       "--coordinator-ca /nonexistent/ca.crt: cannot read the file"},
      {{"--coordinator-ca=" + secret},
       "--coordinator-ca " + secret + ": the file holds no PEM CERTIFICATE"},
      {{"--coordinator-user=summon", "--coordinator-password-file=" + blank},
       "--coordinator-password-file " + blank + ": the first line is empty"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = etcd;
    args.insert(args.end(), flags.begin(), flags.end());
    const auto [code, log] = RunToExit(args);
    EXPECT_EQ(code, kInvalidArgument) << message;
    EXPECT_TRUE(absl::StrContains(log, message)) << log;
    EXPECT_FALSE(absl::StrContains(log, "hunter2")) << log;
    EXPECT_FALSE(absl::StrContains(log, "second line")) << log;
  }
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
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  const auto [code, log] =
      RunToExit({"--insecure-local", absl::StrCat("--listen=", taken)});
  EXPECT_EQ(code, kUnavailable);
  // One clean line, not gRPC's raw bind error before it.
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("summond failed to start: UNAVAILABLE: cannot listen "
                        "on ",
                        taken, " (in use, or not a local address?)")))
      << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  close(fd);
}

// Flag errors name the flag as typed (dashes), suggest the flag meant, and
// exit INVALID_ARGUMENT like every other bad flag.
TEST(SummondFlagsTest, FlagErrorsNameTheFlagAsTyped) {
  const int kInvalidArgument = 3;
  auto expect = [&](std::vector<std::string> args, const std::string& says) {
    const auto [code, log] = RunToExit(std::move(args));
    EXPECT_EQ(code, kInvalidArgument) << log;
    EXPECT_TRUE(absl::StrContains(log, says)) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  };
  expect({"--insecure-local", "--local-rnaks=2"},
         "unknown flag --local-rnaks; did you mean --local-ranks? (summond "
         "--help lists the flags)");
  expect({"--insecure-local", "--lisen", "127.0.0.1:0"},
         "unknown flag --lisen; did you mean --listen?");
  expect({"--insecure-local", "--metrics-listn=127.0.0.1:0"},
         "unknown flag --metrics-listn; did you mean --metrics-listen?");
  expect({"--insecure-local", "--frobnicate"},
         "unknown flag --frobnicate (summond --help lists the flags)");
  expect({"--insecure-local", "--local-ranks=four"},
         "Illegal value 'four' specified for --local-ranks");
  expect({"--insecure-local", "--data-dir"}, "--data-dir needs a value");
  // Abseil's own flags pass the vetting.
  const auto [code, log] = RunToExit({"--version"});
  EXPECT_EQ(code, 0) << log;
  EXPECT_TRUE(absl::StartsWith(log, "summond ")) << log;
}

// gRPC would listen on a HOST alone at port 443, silently: refused as
// summonctl and the Python client refuse such an address.
TEST(SummondFlagsTest, ListenersMustNameTheirPort) {
  const int kInvalidArgument = 3;
  for (const std::string flag : {"--listen", "--metrics-listen",
                                 "--health-listen"}) {
    const auto [code, log] =
        RunToExit({"--insecure-local", flag, "127.0.0.1"});
    EXPECT_EQ(code, kInvalidArgument) << log;
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat(flag, " '127.0.0.1' names no port: write HOST:PORT "
                                "(127.0.0.1:7070, [::1]:7070; port 0 picks a "
                                "free one)")))
        << log;
  }
}

// One summond per --data-dir: a second refuses at once naming the holder;
// a SIGKILLed holder leaves nothing stuck.
TEST(SummondDataDirTest, SecondDaemonOnADataDirIsRefusedUntilTheFirstDies) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/locked-data");
  const std::string port_file = absl::StrCat(testing::TempDir(), "/first.port");
  std::remove(port_file.c_str());
  const pid_t first =
      Spawn({"--insecure-local", "--data-dir", dir, "--port-file", port_file,
             "--log-level=warn"});
  ASSERT_GT(first, 0);
  const int port = ReadPortFile(port_file);
  ASSERT_GT(port, 0);

  const auto started = std::chrono::steady_clock::now();
  const auto [code, log] = RunToExit(
      {"--insecure-local", "--data-dir", dir, "--listen=127.0.0.1:0"});
  EXPECT_EQ(code, 9);  // FAILED_PRECONDITION
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            std::chrono::seconds(5));
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("data dir ", dir, " in use by pid ", first,
                        " (another summond holds ", dir,
                        "/summond.lock): stop it first, or give this daemon "
                        "its own --data-dir")))
      << log;
  EXPECT_TRUE(IsServing(port)) << "the holder must be untouched";

  // A crash releases the lock: the next daemon starts on the same dir.
  ASSERT_EQ(kill(first, SIGKILL), 0);
  waitpid(first, nullptr, 0);
  std::remove(port_file.c_str());
  const pid_t next = Spawn({"--insecure-local", "--data-dir", dir,
                            "--port-file", port_file, "--log-level=warn"});
  const int next_port = ReadPortFile(port_file);
  EXPECT_TRUE(next_port > 0 && IsServing(next_port));
  ASSERT_EQ(kill(next, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(next), 0);
}

}  // namespace
