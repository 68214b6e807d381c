#ifndef SUMMON_CORE_SESSION_STATE_H_
#define SUMMON_CORE_SESSION_STATE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace summon::core {

// A session's life: OPENING (rules checked, gather running) -> OPEN (every
// node acknowledged) -> CLOSING (writeback or release) -> CLOSED. FAILED is
// reached from any live state: a failed gather, lease expiry, node failure,
// abort, or an aborted writeback. CLOSED and FAILED are terminal.
enum class SessionState {
  kOpening,
  kOpen,
  kClosing,
  kClosed,
  kFailed,
};

// "OPENING", "OPEN", "CLOSING", "CLOSED", "FAILED".
absl::string_view SessionStateName(SessionState state);

bool IsTerminal(SessionState state);

// OK for a legal transition; FAILED_PRECONDITION naming both states
// otherwise (including a terminal state moving anywhere, itself included).
absl::Status CheckTransition(SessionState from, SessionState to);

}  // namespace summon::core

#endif  // SUMMON_CORE_SESSION_STATE_H_
