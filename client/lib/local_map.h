#ifndef SUMMON_CLIENT_LIB_LOCAL_MAP_H_
#define SUMMON_CLIENT_LIB_LOCAL_MAP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "summon/v1/summon.pb.h"

namespace summon::client {

// A connected stream socket to the daemon's broker socket ("@name": the
// abstract namespace), the caller's to close; UNAVAILABLE naming the socket
// and errno when it cannot be reached (not on the daemon's host).
absl::StatusOr<int> ConnectToBroker(absl::string_view socket);

// The broker's one-message answer (`n` and `reply` as recv/recvmsg
// returned them): 'K' accepts, anything else is the daemon's reason,
// FAILED_PRECONDITION "the daemon refused <what>: ..."; UNAVAILABLE
// "the daemon's <socket> closed unanswered" when nothing came.
absl::Status BrokerAnswer(ssize_t n, const char* reply, absl::string_view what,
                          absl::string_view socket = "socket");

// Redeems a MapSession token at the daemon's broker socket ("@name": the
// abstract namespace) and returns the descriptor it hands over (the
// caller's to close). FAILED_PRECONDITION with the daemon's reason when it
// refuses (used, expired token; session no longer open), UNAVAILABLE when
// the socket cannot be reached (not on the daemon's host).
absl::StatusOr<int> RedeemMapToken(absl::string_view socket,
                                   absl::string_view token);

// A read-only mapping of a session's copy (MapSession), unmapped when
// destroyed. Valid while the session is OPEN: after it ends the bytes stay
// readable until unmapped but are no longer the session's promise (and the
// daemon never reuses them for anything else).
class MappedSession {
 public:
  // Redeems `grant`'s token and maps `copy_bytes` of the descriptor.
  static absl::StatusOr<MappedSession> Map(v1::MapSessionResponse grant);

  MappedSession() = default;  // Nothing mapped.
  MappedSession(MappedSession&& other) noexcept;
  MappedSession& operator=(MappedSession&& other) noexcept;
  MappedSession(const MappedSession&) = delete;
  MappedSession& operator=(const MappedSession&) = delete;
  ~MappedSession();

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const v1::MapSessionResponse& grant() const { return grant_; }
  // The stored bytes of tensor `fqn` (the daemon's primary name); NOT_FOUND
  // for a name not in the session.
  absl::StatusOr<absl::Span<const uint8_t>> Tensor(
      absl::string_view fqn) const;

 private:
  void Reset();

  v1::MapSessionResponse grant_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_LOCAL_MAP_H_
