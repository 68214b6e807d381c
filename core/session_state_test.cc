#include "core/session_state.h"

#include <set>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace summon::core {
namespace {

constexpr SessionState kAllStates[] = {
    SessionState::kOpening, SessionState::kOpen, SessionState::kClosing,
    SessionState::kClosed, SessionState::kFailed};

TEST(SessionStateTest, Names) {
  EXPECT_EQ(SessionStateName(SessionState::kOpening), "OPENING");
  EXPECT_EQ(SessionStateName(SessionState::kOpen), "OPEN");
  EXPECT_EQ(SessionStateName(SessionState::kClosing), "CLOSING");
  EXPECT_EQ(SessionStateName(SessionState::kClosed), "CLOSED");
  EXPECT_EQ(SessionStateName(SessionState::kFailed), "FAILED");
}

TEST(SessionStateTest, OnlyClosedAndFailedAreTerminal) {
  EXPECT_FALSE(IsTerminal(SessionState::kOpening));
  EXPECT_FALSE(IsTerminal(SessionState::kOpen));
  EXPECT_FALSE(IsTerminal(SessionState::kClosing));
  EXPECT_TRUE(IsTerminal(SessionState::kClosed));
  EXPECT_TRUE(IsTerminal(SessionState::kFailed));
}

TEST(SessionStateTest, ExactlyTheDesignedTransitionsAreLegal) {
  const std::set<std::pair<SessionState, SessionState>> legal = {
      {SessionState::kOpening, SessionState::kOpen},
      {SessionState::kOpening, SessionState::kFailed},
      {SessionState::kOpen, SessionState::kClosing},
      {SessionState::kOpen, SessionState::kFailed},
      {SessionState::kClosing, SessionState::kClosed},
      {SessionState::kClosing, SessionState::kFailed},
  };
  for (SessionState from : kAllStates) {
    for (SessionState to : kAllStates) {
      const std::string pair = std::string(SessionStateName(from)) + " -> " +
                               std::string(SessionStateName(to));
      absl::Status status = CheckTransition(from, to);
      if (legal.count({from, to}) > 0) {
        EXPECT_TRUE(status.ok()) << pair << ": " << status;
        continue;
      }
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << pair;
      // Both names, in order, as whole words ("OPEN" is a prefix of
      // "OPENING", so a substring search would not tell them apart).
      const std::string expected = "session cannot move from " +
                                   std::string(SessionStateName(from)) +
                                   " to " + std::string(SessionStateName(to));
      const std::string message(status.message());
      EXPECT_TRUE(message == expected ||
                  message == expected + " (terminal state)")
          << pair << ": " << message;
    }
  }
}

}  // namespace
}  // namespace summon::core
