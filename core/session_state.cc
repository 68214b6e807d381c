#include "core/session_state.h"

#include "absl/strings/str_cat.h"

namespace summon::core {

absl::string_view SessionStateName(SessionState state) {
  switch (state) {
    case SessionState::kOpening:
      return "OPENING";
    case SessionState::kOpen:
      return "OPEN";
    case SessionState::kClosing:
      return "CLOSING";
    case SessionState::kClosed:
      return "CLOSED";
    case SessionState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";  // Unreachable: every enumerator is handled above.
}

bool IsTerminal(SessionState state) {
  return state == SessionState::kClosed || state == SessionState::kFailed;
}

absl::Status CheckTransition(SessionState from, SessionState to) {
  bool legal = false;
  switch (from) {
    case SessionState::kOpening:
      legal = to == SessionState::kOpen || to == SessionState::kFailed;
      break;
    case SessionState::kOpen:
      legal = to == SessionState::kClosing || to == SessionState::kFailed;
      break;
    case SessionState::kClosing:
      legal = to == SessionState::kClosed || to == SessionState::kFailed;
      break;
    case SessionState::kClosed:
    case SessionState::kFailed:
      break;
  }
  if (legal) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "session cannot move from ", SessionStateName(from), " to ",
      SessionStateName(to), IsTerminal(from) ? " (terminal state)" : ""));
}

}  // namespace summon::core
