#include "server/coordinator/etcd_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "spdlog/spdlog.h"

namespace summon::server {

namespace pb = ::etcdserverpb;

namespace {

// etcd's "require leader" metadata (clientv3.WithRequireLeader): a member
// whose raft has no leader answers ErrGRPCNoLeader at once and cancels
// watches, instead of holding the request until it times out.
constexpr char kRequireLeaderKey[] = "hasleader";

// Also etcd's own "context deadline exceeded" (code UNKNOWN): the member
// held the request until the deadline it was sent with ran out (it had lost
// its quorum, or its raft was too slow to commit in time), answering just
// before the client's own deadline fired.
bool NoLeader(const grpc::Status& status) {
  return absl::StrContains(status.error_message(), "no leader") ||
         (status.error_code() == grpc::StatusCode::UNKNOWN &&
          absl::StrContains(status.error_message(),
                            "context deadline exceeded"));
}

// Whether another attempt may follow a failure: etcd could not decide
// (no leader, unreachable, no answer in time). Every request summon sends
// is safe to repeat: puts write the same bytes, creations and campaigns are
// guarded by compares whose failure branch reads what the first attempt
// did, the epoch claim reads the epoch key back, keepalives and revokes are
// idempotent, and a lease granted twice expires unused.
bool Retriable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         NoLeader(status);
}

// etcd's authentication token metadata (clientv3's "token").
constexpr char kTokenKey[] = "token";

// etcd no longer takes the token sent: simple tokens expire unused (5 min,
// --auth-token-ttl) and live in each member's memory (a restarted member
// knows none); a change of users or roles outdates them all. clientv3
// authenticates again on both; so does summon.
bool StaleTokenMessage(absl::string_view message) {
  return absl::StrContains(message, "invalid auth token") ||
         absl::StrContains(message, "revision of auth store is old");
}
bool StaleToken(const grpc::Status& status) {
  return StaleTokenMessage(status.error_message());
}

// etcd refused the user, the password or the missing token: etcd answers
// INVALID_ARGUMENT for these, summon says UNAUTHENTICATED.
bool AuthRefused(const grpc::Status& status) {
  return StaleToken(status) ||
         absl::StrContains(status.error_message(), "authentication failed") ||
         absl::StrContains(status.error_message(), "user name is empty");
}

// A TLS handshake that failed (gRPC says UNAVAILABLE, as for a member that
// is down): a certificate missing, expired or signed by another CA, or TLS
// on one side only. gRPC 1.51 often reports only that the member closed the
// connection it had accepted ("Endpoint read failed", "Socket closed"),
// where a member that is down refuses the connection instead.
bool HandshakeFailed(absl::string_view message) {
  return absl::StrContains(message, "andshake") ||
         absl::StrContains(message, "SSL") ||
         absl::StrContains(message, "ertificate") ||
         absl::StrContains(message, "Endpoint read failed") ||
         absl::StrContains(message, "Socket closed");
}

// Calls CheckAccess makes before it takes etcd for down.
constexpr int kAccessAttempts = 3;

// Between attempts on the members in turn.
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);

// The payload that marks a failure etcd answered with "no leader".
constexpr char kNoLeaderPayload[] = "summon.dev/etcd-no-leader";

}  // namespace

absl::Status NoQuorumError(absl::string_view why) {
  return absl::UnavailableError(
      absl::StrCat("coordinator has no quorum: ", why));
}

bool EtcdRefusedAccess(const absl::Status& status) {
  return absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status) ||
         (absl::IsUnavailable(status) && HandshakeFailed(status.message()));
}

bool EtcdHasNoLeader(const absl::Status& status) {
  return status.GetPayload(kNoLeaderPayload).has_value();
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Every key: etcd reads "\0" as "no upper bound".
  return std::string(1, '\0');
}

class EtcdClient::Call {
 public:
  Call(EtcdClient& client, absl::Time deadline, const std::string& token)
      : client_(client) {
    context_.set_deadline(absl::ToChronoTime(deadline));
    context_.AddMetadata(kRequireLeaderKey, "true");
    if (!token.empty()) context_.AddMetadata(kTokenKey, token);
    absl::MutexLock lock(&client_.mu_);
    client_.in_flight_.insert(&context_);
  }
  ~Call() {
    absl::MutexLock lock(&client_.mu_);
    client_.in_flight_.erase(&context_);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  grpc::ClientContext* context() { return &context_; }

 private:
  EtcdClient& client_;
  grpc::ClientContext context_;
};

EtcdClient::EtcdClient(Options options)
    : options_(std::move(options)), password_(options_.password) {
  for (const std::string& endpoint : options_.endpoints) {
    channels_.push_back(NewChannel(endpoint));
  }
}

std::shared_ptr<grpc::Channel> EtcdClient::NewChannel(
    const std::string& endpoint) const {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options_.credentials != nullptr ? options_.credentials
                                      : grpc::InsecureChannelCredentials();
  grpc::ChannelArguments arguments;
  // A connection that went silent (a partition) is found dead and replaced.
  // etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time).
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
  // This channel's connection is its own: not a subchannel shared with
  // another client, nor one still backing off from an earlier failure.
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(endpoint, credentials, arguments);
}

int EtcdClient::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

void EtcdClient::Rotate(int failed) {
  absl::MutexLock lock(&mu_);
  if (current_ == failed) {
    current_ = (failed + 1) % static_cast<int>(options_.endpoints.size());
  }
}

std::shared_ptr<grpc::Channel> EtcdClient::Channel(int endpoint) const {
  absl::MutexLock lock(&mu_);
  return channels_[endpoint];
}

void EtcdClient::Reconnect(int endpoint,
                           const std::shared_ptr<grpc::Channel>& failed) {
  std::shared_ptr<grpc::Channel> fresh =
      NewChannel(options_.endpoints[endpoint]);
  absl::MutexLock lock(&mu_);
  if (channels_[endpoint] == failed) channels_[endpoint] = std::move(fresh);
}

void EtcdClient::CancelInFlight() {
  absl::MutexLock lock(&mu_);
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

namespace {

absl::Status MapFailure(absl::string_view what, absl::string_view endpoint,
                        const grpc::Status& status) {
  const std::string why =
      absl::StrCat(what, " at ", endpoint, ": ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return NoQuorumError(why);
    case grpc::StatusCode::CANCELLED:
      return absl::CancelledError(absl::StrCat("coordinator stopped: ", why));
    default:
      if (NoLeader(status)) return NoQuorumError(why);
      if (AuthRefused(status)) {
        return absl::UnauthenticatedError(absl::StrCat("etcd: ", why));
      }
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat("etcd: ", why));
  }
}

}  // namespace

absl::StatusOr<std::string> EtcdClient::Token() {
  if (options_.user.empty()) return std::string();
  std::vector<std::string> passwords;
  {
    absl::MutexLock lock(&mu_);
    if (!token_.empty()) return token_;
    passwords.push_back(password_);
  }
  if (options_.read_password) {
    absl::StatusOr<std::string> read = options_.read_password();
    if (!read.ok()) {
      spdlog::warn(
          "coordinator: the etcd password not read again ({}); "
          "the last one etcd accepted is used",
          read.status().ToString());
    } else if (*read != passwords.front()) {
      passwords.insert(passwords.begin(), *std::move(read));
    }
  }
  absl::Status refused;
  for (const std::string& password : passwords) {
    pb::AuthenticateRequest request;
    request.set_name(options_.user);
    request.set_password(password);
    absl::StatusOr<pb::AuthenticateResponse> granted =
        Unary<pb::AuthenticateResponse>(
            absl::StrCat("authenticate as user '", options_.user, "'"),
            [&](const std::shared_ptr<grpc::Channel>& channel,
                grpc::ClientContext* context,
                pb::AuthenticateResponse* response) {
              return pb::Auth::NewStub(channel)->Authenticate(context, request,
                                                              response);
            },
            /*authenticated=*/false);
    if (granted.ok()) {
      absl::MutexLock lock(&mu_);
      if (password_ != password) {
        spdlog::info(
            "coordinator: etcd accepted the rotated password of "
            "user '{}'",
            options_.user);
      }
      password_ = password;
      token_ = granted->token();
      return token_;
    }
    // Only a refused password is worth another try; etcd unreachable is
    // the same for both.
    if (!absl::IsUnauthenticated(granted.status())) return granted.status();
    refused = granted.status();
  }
  return refused;
}

void EtcdClient::DropToken(const std::string& stale) {
  absl::MutexLock lock(&mu_);
  if (token_ == stale) token_.clear();
}

template <typename Response, typename Attempt>
absl::StatusOr<Response> EtcdClient::Unary(absl::string_view what,
                                           Attempt attempt,
                                           bool authenticated) {
  if (options_.endpoints.empty()) return NoQuorumError("no etcd endpoints");
  const absl::Time deadline = absl::Now() + options_.call_timeout;
  // One attempt may hang on a member that lost its leader without knowing
  // yet (its election timeout, 1 s by default, has not fired): half the
  // budget each, so another member is still asked in time.
  const absl::Duration per_attempt = options_.call_timeout / 2;
  const int count = static_cast<int>(options_.endpoints.size());
  int endpoint = current();
  grpc::Status status;
  // Any member answered "no leader" during this call (the last attempt may
  // have gone to a member that is down).
  bool no_leader = false;
  bool token_renewed = false;
  while (true) {
    std::string token;
    if (authenticated) {
      absl::StatusOr<std::string> held = Token();
      if (!held.ok()) return held.status();
      token = *std::move(held);
    }
    const std::shared_ptr<grpc::Channel> channel = Channel(endpoint);
    Call call(*this, std::min(deadline, absl::Now() + per_attempt), token);
    Response response;
    status = attempt(channel, call.context(), &response);
    if (status.ok()) return response;
    if (!token.empty() && StaleToken(status) && !token_renewed) {
      // Once per call: a new token refused again is etcd's final word.
      DropToken(token);
      token_renewed = true;
      continue;
    }
    if (!Retriable(status)) break;
    no_leader = no_leader || NoLeader(status);
    // Not the member's answer but the connection's: a new channel next.
    if (!NoLeader(status)) Reconnect(endpoint, channel);
    Rotate(endpoint);
    if (absl::Now() + kRetryPause >= deadline) break;
    absl::SleepFor(kRetryPause);
    endpoint = (endpoint + 1) % count;
  }
  absl::Status failed = MapFailure(what, options_.endpoints[endpoint], status);
  if (no_leader && absl::IsUnavailable(failed)) {
    failed.SetPayload(kNoLeaderPayload, absl::Cord("1"));
  }
  return failed;
}

absl::StatusOr<pb::RangeResponse> EtcdClient::Range(
    const pb::RangeRequest& request) {
  return Unary<pb::RangeResponse>(
      "range", [&](const std::shared_ptr<grpc::Channel>& channel,
                   grpc::ClientContext* context, pb::RangeResponse* response) {
        return pb::KV::NewStub(channel)->Range(context, request, response);
      });
}

absl::StatusOr<pb::TxnResponse> EtcdClient::Txn(const pb::TxnRequest& request) {
  return Unary<pb::TxnResponse>(
      "txn", [&](const std::shared_ptr<grpc::Channel>& channel,
                 grpc::ClientContext* context, pb::TxnResponse* response) {
        return pb::KV::NewStub(channel)->Txn(context, request, response);
      });
}

absl::StatusOr<pb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_s) {
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  return Unary<pb::LeaseGrantResponse>(
      "lease grant",
      [&](const std::shared_ptr<grpc::Channel>& channel,
          grpc::ClientContext* context, pb::LeaseGrantResponse* response) {
        return pb::Lease::NewStub(channel)->LeaseGrant(context, request,
                                                       response);
      });
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  return Unary<pb::LeaseRevokeResponse>(
             "lease revoke",
             [&](const std::shared_ptr<grpc::Channel>& channel,
                 grpc::ClientContext* context,
                 pb::LeaseRevokeResponse* response) {
               return pb::Lease::NewStub(channel)->LeaseRevoke(context, request,
                                                               response);
             })
      .status();
}

absl::StatusOr<pb::LeaseKeepAliveResponse> EtcdClient::KeepAliveOnce(
    int64_t lease, std::chrono::steady_clock::time_point* sent) {
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  // A keepalive renews the lease to its full TTL however often it is sent:
  // another attempt after an undelivered one is harmless.
  return Unary<pb::LeaseKeepAliveResponse>(
      "lease keepalive",
      [&](const std::shared_ptr<grpc::Channel>& channel,
          grpc::ClientContext* context, pb::LeaseKeepAliveResponse* response) {
        auto stream = pb::Lease::NewStub(channel)->LeaseKeepAlive(context);
        *sent = std::chrono::steady_clock::now();
        if (stream->Write(request)) {
          stream->WritesDone();
          if (!stream->Read(response)) response->Clear();
        }
        grpc::Status status = stream->Finish();
        if (status.ok() && response->id() != lease) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "keepalive stream ended without an answer");
        }
        return status;
      });
}

absl::Status EtcdClient::CheckAccess(absl::string_view key) {
  pb::RangeRequest request;
  request.set_key(std::string(key));
  // A few calls: on a loaded machine a TLS connection may not be made
  // within one call's deadline, and its refusal would pass for an etcd that
  // does not answer.
  absl::Status probe;
  for (int attempt = 0; attempt < kAccessAttempts; ++attempt) {
    probe = Range(request).status();
    if (probe.ok() || EtcdRefusedAccess(probe)) break;
  }
  if (probe.ok()) return probe;
  if (!EtcdRefusedAccess(probe)) {
    spdlog::warn("coordinator: etcd does not answer yet: {}", probe.ToString());
    return absl::OkStatus();
  }
  const bool tls = absl::IsUnavailable(probe);
  absl::string_view why = probe.message();
  // Not a lost quorum: the connection itself was refused.
  absl::ConsumePrefix(&why, "coordinator has no quorum: ");
  return absl::Status(
      tls ? absl::StatusCode::kUnauthenticated : probe.code(),
      absl::StrCat("etcd refuses this node (",
                   tls ? "the TLS handshake failed: check --coordinator-ca, "
                         "--coordinator-cert and --coordinator-key"
                       : "check --coordinator-user, "
                         "--coordinator-password-file and the user's etcd "
                         "role",
                   "): ", why));
}

absl::StatusOr<mvccpb::Event> EtcdClient::AwaitEvent(
    absl::string_view key, int64_t start_revision,
    mvccpb::Event::EventType type, absl::Time deadline) {
  if (options_.endpoints.empty()) return NoQuorumError("no etcd endpoints");
  absl::StatusOr<std::string> token = Token();
  if (!token.ok()) return token.status();
  bool token_refused = false;
  absl::StatusOr<mvccpb::Event> event =
      WatchOnce(key, start_revision, type, deadline, *token, &token_refused);
  if (!token_refused) return event;
  // etcd checks a watch's token when the watch is created and cancels it
  // ("invalid auth token", or "permission denied" when the token no longer
  // names a user with the rights): once more with a new one.
  DropToken(*token);
  token = Token();
  if (!token.ok()) return token.status();
  return WatchOnce(key, start_revision, type, deadline, *token, &token_refused);
}

absl::StatusOr<mvccpb::Event> EtcdClient::WatchOnce(
    absl::string_view key, int64_t start_revision,
    mvccpb::Event::EventType type, absl::Time deadline,
    const std::string& token, bool* token_refused) {
  const int endpoint = current();
  const std::shared_ptr<grpc::Channel> channel = Channel(endpoint);
  Call call(*this, deadline, token);
  auto stream = pb::Watch::NewStub(channel)->Watch(call.context());
  pb::WatchRequest request;
  pb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(std::string(key));
  create->set_start_revision(start_revision);
  create->add_filters(type == mvccpb::Event::PUT
                          ? pb::WatchCreateRequest::NODELETE
                          : pb::WatchCreateRequest::NOPUT);
  absl::StatusOr<mvccpb::Event> result =
      absl::DeadlineExceededError(absl::StrCat("no event on ", key));
  bool decided = false;
  if (stream->Write(request)) {
    pb::WatchResponse response;
    while (!decided && stream->Read(&response)) {
      if (response.compact_revision() > 0) {
        result = absl::OutOfRangeError("watch start revision was compacted");
        decided = true;
      } else if (response.canceled() && !token.empty() &&
                 (StaleTokenMessage(response.cancel_reason()) ||
                  absl::StrContains(response.cancel_reason(),
                                    "permission denied"))) {
        *token_refused = true;
        result = absl::PermissionDeniedError(
            absl::StrCat("etcd: watch at ", options_.endpoints[endpoint],
                         " refused: ", response.cancel_reason()));
        decided = true;
      } else if (response.canceled()) {
        result = NoQuorumError(
            absl::StrCat("watch at ", options_.endpoints[endpoint],
                         " cancelled: ", response.cancel_reason()));
        decided = true;
      }
      for (const mvccpb::Event& event : response.events()) {
        if (!decided && event.type() == type) {
          result = event;
          decided = true;
        }
      }
    }
  }
  // Ending the watch early: the server learns from the cancellation.
  if (decided) call.context()->TryCancel();
  const grpc::Status status = stream->Finish();
  if (decided) return result;
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.ok() || absl::Now() >= deadline) {
    return result;
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    Reconnect(endpoint, channel);
    Rotate(endpoint);
  }
  return MapFailure("watch", options_.endpoints[endpoint], status);
}

}  // namespace summon::server
