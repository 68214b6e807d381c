// A rolling update crosses releases (issue 31): real summond processes.
//  - The data dir carries its format (<data-dir>/FORMAT): a newer one is
//    refused with exit code 9 (FAILED_PRECONDITION) and a message saying what
//    to do, an unreadable one too (without echoing it), and a data dir without
//    the file (fresh, or of a release before it) is adopted as format 1.
//  - The Join carries the Peer protocol versions: a node that shares no
//    version with the leader (more than one release newer, or too old) is
//    refused, and both logs say why and what to do; a node one release newer
//    (it still speaks the cluster's version) joins and the cluster serves.
// --testing-peer-protocol makes a daemon speak as another release would.

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/cluster/daemon_testing.h"
#include "tests/faults/child_process.h"
#include "version.h"

namespace summon::tests {
namespace {

using grpc::health::v1::HealthCheckResponse;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

class VersionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    root_ = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
            absl::StrCat("versions-", getpid());
    std::filesystem::create_directories(root_);
  }
  void TearDown() override {
    for (ChildProcess& child : children_) {
      if (child.running()) {
        (void)child.Signal(SIGTERM);
        (void)child.WaitExit(absl::Seconds(10));
      }
    }
    std::filesystem::remove_all(root_);
  }

  std::string Dir(const std::string& name) {
    const std::string dir = (root_ / name).string();
    std::filesystem::create_directories(dir);
    return dir;
  }

  // summond with `flags`, its output in <root>/<log>.log.
  ChildProcess& Start(const std::string& log, std::vector<std::string> flags) {
    ChildProcess::Spec spec;
    spec.argv = {RunfilePath("server/summond"), "--insecure-local",
                 "--local-ranks=1", "--heartbeat-ms=200", "--log-level=warn"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.log_path = LogPath(log);
    absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(spec);
    EXPECT_TRUE(child.ok()) << child.status();
    children_.push_back(*std::move(child));
    return children_.back();
  }
  std::string LogPath(const std::string& log) {
    return (root_ / (log + ".log")).string();
  }

  // Until <root>/<log>.log contains `text`, at most `timeout`.
  bool LogShows(const std::string& log, const std::string& text,
                absl::Duration timeout = absl::Seconds(15)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (ReadFile(LogPath(log)).find(text) == std::string::npos) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return true;
  }

  absl::StatusOr<HealthCheckResponse::ServingStatus> Health(
      const std::string& address) {
    return CheckHealth(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  // Starts node `rank` of a two-node static cluster on `ports`, speaking
  // `protocol` ("" its own).
  ChildProcess& StartNode(const std::vector<int>& ports, int rank,
                          const std::string& protocol, const std::string& log) {
    std::vector<std::string> flags = {
        absl::StrCat("--nodes=127.0.0.1:", ports[0], ",127.0.0.1:", ports[1]),
        "--coordinator=static", absl::StrCat("--node-rank=", rank),
        "--data-dir=" + Dir(absl::StrCat("node", rank))};
    if (!protocol.empty()) {
      flags.push_back("--testing-peer-protocol=" + protocol);
    }
    return Start(log, flags);
  }

  std::filesystem::path root_;
  std::deque<ChildProcess> children_;  // References stay valid as it grows.
};

TEST_F(VersionsTest, DataDirOfANewerFormatIsRefused) {
  const std::string dir = Dir("newer");
  WriteFile(dir + "/FORMAT", "2\n");
  ChildProcess& daemon =
      Start("newer", {"--listen=127.0.0.1:0", "--data-dir=" + dir});
  absl::StatusOr<ExitStatus> exit = daemon.WaitExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->code.value_or(-1), 9)  // FAILED_PRECONDITION
      << ExitStatusText(*exit);
  EXPECT_NE(
      ReadFile(LogPath("newer"))
          .find(absl::StrCat(
              "summond failed to start: FAILED_PRECONDITION: data dir ", dir,
              " has format 2, written by a newer summond; this summond (",
              kVersion,
              ") understands formats up to 1 and does not read it: run the "
              "newer release on this node again (a rolling update rolled "
              "back stops here), or start this release on a data dir it "
              "wrote (restore a backup, or move this one aside and create "
              "the models again)")),
      std::string::npos)
      << ReadFile(LogPath("newer"));
  // Nothing of the data dir was touched.
  EXPECT_EQ(ReadFile(dir + "/FORMAT"), "2\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/models.json"));
}

TEST_F(VersionsTest, UnreadableFormatIsRefusedWithoutEchoingIt) {
  const std::string dir = Dir("garbage");
  WriteFile(dir + "/FORMAT", "s3cr3t-not-a-number\n");
  ChildProcess& daemon =
      Start("garbage", {"--listen=127.0.0.1:0", "--data-dir=" + dir});
  absl::StatusOr<ExitStatus> exit = daemon.WaitExit(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->code.value_or(-1), 9) << ExitStatusText(*exit);
  const std::string log = ReadFile(LogPath("garbage"));
  EXPECT_NE(log.find(absl::StrCat("data dir ", dir, ": ", dir,
                                  "/FORMAT holds no format number")),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("s3cr3t"), std::string::npos) << log;
}

TEST_F(VersionsTest, DataDirWithoutFormatIsAdoptedAsFormat1) {
  // A data dir of a release before FORMAT: its lock file and records, no
  // FORMAT. The daemon serves on it and records format 1.
  const std::string dir = Dir("old");
  WriteFile(dir + "/summond.lock", "12345\n");
  absl::StatusOr<std::vector<int>> ports = PickFreePorts(1);
  ASSERT_TRUE(ports.ok()) << ports.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*ports)[0]);
  ChildProcess& daemon =
      Start("old", {"--listen=" + address, "--data-dir=" + dir});
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::StatusOr<HealthCheckResponse::ServingStatus> health;
  while (!(health = Health(address)).ok() && absl::Now() < deadline) {
    ASSERT_FALSE(daemon.PollExit().has_value()) << ReadFile(LogPath("old"));
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthCheckResponse::SERVING);
  EXPECT_EQ(ReadFile(dir + "/FORMAT"), "1\n");
  ASSERT_TRUE(daemon.Signal(SIGTERM).ok());
  absl::StatusOr<ExitStatus> exit = daemon.WaitExit(absl::Seconds(15));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->code.value_or(-1), 0) << ExitStatusText(*exit);
}

TEST_F(VersionsTest, JoinNeedsAPeerProtocolInCommon) {
  absl::StatusOr<std::vector<int>> ports = PickFreePorts(2);
  ASSERT_TRUE(ports.ok()) << ports.status();
  const std::string leader = absl::StrCat("127.0.0.1:", (*ports)[0]);
  const std::string follower = absl::StrCat("127.0.0.1:", (*ports)[1]);
  const std::string v = kVersion;

  // Node 1 speaks only protocol 2 (two releases ahead of a cluster on 1).
  StartNode(*ports, 0, "", "leader");
  ChildProcess& newer = StartNode(*ports, 1, "2", "newer");
  const std::string refusal = absl::StrCat(
      "node 1 (summond ", v,
      ") speaks peer protocol 2 and the leader, node 0 "
      "(summond ",
      v,
      "), speaks 1: no version in common, node 1 cannot join. "
      "Node 1 is more than one release newer than the cluster: update the "
      "cluster one release at a time (each release still speaks the previous "
      "one's protocol), or run node 1 on the cluster's release until the "
      "others are updated");
  EXPECT_TRUE(LogShows("leader", "cluster: refused node 1: " + refusal))
      << ReadFile(LogPath("leader"));
  EXPECT_TRUE(
      LogShows("newer", "cluster: node 1 cannot join the leader: " + refusal))
      << ReadFile(LogPath("newer"));
  for (const std::string& address : {leader, follower}) {
    absl::StatusOr<HealthCheckResponse::ServingStatus> health = Health(address);
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, HealthCheckResponse::NOT_SERVING) << address;
  }
  ASSERT_TRUE(newer.Kill().ok());

  // One release newer: speaks 1..2, so it joins a cluster on 1 and serves.
  ChildProcess& next = StartNode(*ports, 1, "1:2", "next");
  EXPECT_TRUE(WaitServing(
                  {leader, follower}, absl::Seconds(20),
                  [](const std::string& address) {
                    return grpc::CreateChannel(
                        address, grpc::InsecureChannelCredentials());
                  },
                  [&]() -> absl::Status {
                    if (next.PollExit().has_value()) {
                      return absl::UnavailableError("node 1 exited");
                    }
                    return absl::OkStatus();
                  })
                  .ok())
      << ReadFile(LogPath("next"));
  EXPECT_EQ(ReadFile(LogPath("next")).find("cannot join"), std::string::npos);
}

TEST_F(VersionsTest, ANodeTooOldForTheClusterIsRefused) {
  absl::StatusOr<std::vector<int>> ports = PickFreePorts(2);
  ASSERT_TRUE(ports.ok()) << ports.status();
  const std::string v = kVersion;
  // The leader speaks 2..3 (its release dropped protocol 1); node 1 speaks 1.
  StartNode(*ports, 0, "2:3", "leader");
  StartNode(*ports, 1, "", "old");
  const std::string refusal = absl::StrCat(
      "node 1 (summond ", v,
      ") speaks peer protocol 1 and the leader, node 0 "
      "(summond ",
      v,
      "), speaks 2..3: no version in common, node 1 cannot "
      "join. Node 1 is too old for this cluster: update it to the cluster's "
      "release");
  EXPECT_TRUE(LogShows("leader", "cluster: refused node 1: " + refusal))
      << ReadFile(LogPath("leader"));
  EXPECT_TRUE(
      LogShows("old", "cluster: node 1 cannot join the leader: " + refusal))
      << ReadFile(LogPath("old"));
}

}  // namespace
}  // namespace summon::tests
