// SummonClient: the session calls (open, get, list, renew, close). The
// handle that renews and closes a session is session_handle.cc.
#include <optional>
#include <string>

#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"

namespace summon::client {

absl::StatusOr<v1::Session> SummonClient::OpenSession(
    const std::string& model, const v1::SessionOptions& options) const {
  v1::OpenSessionRequest request;
  request.set_model(model);
  *request.mutable_options() = options;
  // A read-only open changes nothing a retry could double.
  if (options.has_writeback() && !options.writeback()) {
    return UnaryThroughElection(&v1::Summon::Stub::OpenSession, request);
  }
  return Unary(*summon_, &v1::Summon::Stub::OpenSession, NewContext(), request);
}

absl::StatusOr<v1::Session> SummonClient::GetSession(
    const std::string& session_id) const {
  v1::GetSessionRequest request;
  request.set_session_id(session_id);
  return Unary(*summon_, &v1::Summon::Stub::GetSession, NewContext(), request);
}

absl::StatusOr<v1::ListSessionsResponse> SummonClient::ListSessions(
    const std::string& model, bool all) const {
  v1::ListSessionsRequest request;
  request.set_model(model);
  request.set_all(all);
  return UnaryThroughElection(&v1::Summon::Stub::ListSessions, request);
}

absl::StatusOr<v1::Session> SummonClient::RenewSession(
    const std::string& session_id,
    std::optional<uint32_t> lease_seconds) const {
  v1::RenewSessionRequest request;
  request.set_session_id(session_id);
  if (lease_seconds) request.set_lease_seconds(*lease_seconds);
  return Unary(*summon_, &v1::Summon::Stub::RenewSession, NewContext(),
               request);
}

absl::StatusOr<v1::CloseSessionResponse> SummonClient::CloseSession(
    const std::string& session_id, bool abort, bool force) const {
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  request.set_abort(abort);
  request.set_force(force);
  return Unary(*summon_, &v1::Summon::Stub::CloseSession, NewContext(),
               request);
}

}  // namespace summon::client
