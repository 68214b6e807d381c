#include "server/service/local_fd_broker.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "client/lib/local_map.h"
#include "gtest/gtest.h"
#include "memory/fd_passing.h"

namespace summon::server {
namespace {

// A memfd holding `text`, as the broker would hand out a session copy.
int FileWith(const std::string& text) {
  const int fd = memfd_create("broker-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  return fd;
}

std::string Contents(int fd) {
  char buffer[64] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer), 0);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

std::unique_ptr<LocalFdBroker> StartOrDie(
    absl::Duration ttl = absl::Seconds(10)) {
  absl::StatusOr<std::unique_ptr<LocalFdBroker>> broker =
      LocalFdBroker::Start(ttl);
  EXPECT_TRUE(broker.ok()) << broker.status();
  return broker.ok() ? *std::move(broker) : nullptr;
}

TEST(LocalFdBrokerTest, ATokenRedeemsItsDescriptorOnce) {
  std::unique_ptr<LocalFdBroker> broker = StartOrDie();
  ASSERT_NE(broker, nullptr);
  EXPECT_EQ(broker->address().substr(0, 8), "@summon-");
  absl::StatusOr<std::string> token =
      broker->Grant(FileWith("session bytes"), [] { return true; });
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->size(), LocalFdBroker::kTokenBytes);
  absl::StatusOr<int> fd = client::RedeemMapToken(broker->address(), *token);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(Contents(*fd), "session bytes");
  close(*fd);
  EXPECT_EQ(broker->pending(), 0);
  absl::StatusOr<int> again = client::RedeemMapToken(broker->address(), *token);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition)
      << again.status();
  EXPECT_NE(again.status().message().find("unknown, used or expired"),
            std::string::npos)
      << again.status();
}

TEST(LocalFdBrokerTest, AWrongTokenGetsNothing) {
  std::unique_ptr<LocalFdBroker> broker = StartOrDie();
  ASSERT_NE(broker, nullptr);
  absl::StatusOr<std::string> token =
      broker->Grant(FileWith("x"), [] { return true; });
  ASSERT_TRUE(token.ok());
  std::string wrong = *token;
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  EXPECT_EQ(client::RedeemMapToken(broker->address(), wrong).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client::RedeemMapToken(broker->address(), "short").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The right one still works: a guess does not burn it.
  absl::StatusOr<int> fd = client::RedeemMapToken(broker->address(), *token);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
}

TEST(LocalFdBrokerTest, AGrantEndsWithItsSessionAndItsTtl) {
  std::unique_ptr<LocalFdBroker> broker = StartOrDie(absl::Milliseconds(50));
  ASSERT_NE(broker, nullptr);
  absl::StatusOr<std::string> closed =
      broker->Grant(FileWith("a"), [] { return false; });
  ASSERT_TRUE(closed.ok());
  absl::StatusOr<int> refused =
      client::RedeemMapToken(broker->address(), *closed);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no longer open"),
            std::string::npos)
      << refused.status();
  absl::StatusOr<std::string> late =
      broker->Grant(FileWith("b"), [] { return true; });
  ASSERT_TRUE(late.ok());
  absl::SleepFor(absl::Milliseconds(120));
  EXPECT_EQ(client::RedeemMapToken(broker->address(), *late).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(broker->pending(), 0);
}

TEST(LocalFdBrokerTest, NoBrokerIsUnavailable) {
  EXPECT_EQ(client::RedeemMapToken("@summon-nobody-here", "t").status().code(),
            absl::StatusCode::kUnavailable);
}

// A client handing `fd` over with `token` (ReadSlices into its buffer): the
// broker's one-byte answer, 'K' or 'E'.
char HandOver(const std::string& address, const std::string& token, int fd) {
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un name{};
  name.sun_family = AF_UNIX;
  std::memcpy(name.sun_path + 1, address.data() + 1, address.size() - 1);
  if (connect(sock, reinterpret_cast<sockaddr*>(&name),
              static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                     address.size())) != 0) {
    close(sock);
    return '?';
  }
  char reply = '?';
  if (memory::SendWithDescriptor(sock, token, fd) < 0 ||
      recv(sock, &reply, 1, 0) != 1) {
    reply = '?';
  }
  close(sock);
  return reply;
}

TEST(LocalFdBrokerTest, AnExpectedTokenBringsTheClientsDescriptorOnce) {
  std::unique_ptr<LocalFdBroker> broker = StartOrDie();
  ASSERT_NE(broker, nullptr);
  absl::StatusOr<std::string> token = broker->Expect();
  ASSERT_TRUE(token.ok()) << token.status();
  const int buffer = FileWith("caller's buffer");
  EXPECT_EQ(HandOver(broker->address(), *token, -1), 'E');  // No descriptor.
  EXPECT_EQ(HandOver(broker->address(), *token, buffer), 'K');
  EXPECT_EQ(HandOver(broker->address(), *token, buffer), 'E');  // Used.
  close(buffer);
  absl::StatusOr<int> fd =
      broker->Await(*token, absl::Now() + absl::Seconds(5), nullptr);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(Contents(*fd), "caller's buffer");
  close(*fd);
  // Never handed over: the wait ends at its deadline, the token forgotten.
  absl::StatusOr<std::string> late = broker->Expect();
  ASSERT_TRUE(late.ok());
  absl::StatusOr<int> none =
      broker->Await(*late, absl::Now() + absl::Milliseconds(100), nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded)
      << none.status();
  const int stray = FileWith("x");
  EXPECT_EQ(HandOver(broker->address(), *late, stray), 'E');
  close(stray);
}

}  // namespace
}  // namespace summon::server
