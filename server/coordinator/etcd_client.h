#ifndef SUMMON_SERVER_COORDINATOR_ETCD_CLIENT_H_
#define SUMMON_SERVER_COORDINATOR_ETCD_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"

namespace summon::server {

// etcd's v3 gRPC API, as summon's coordinator uses it: every call has a
// deadline (`call_timeout`), carries "hasleader" so a member that lost its
// quorum refuses at once instead of queueing the request, and is never a
// serializable read (a cut-off member answers those with stale data).
//
// Failures that mean "etcd cannot decide now" (no leader, unreachable,
// deadline) come back as UNAVAILABLE "coordinator has no quorum: ...";
// anything else keeps its code with an "etcd: " prefix.
//
// The endpoints are tried in turn: a call that failed on one for want of an
// answer (connection refused or lost, a member without a leader, half the
// call's deadline gone) is sent to the next while the deadline allows, and
// the next calls start there. That makes one member's death invisible
// except for etcd's own re-election stall; every request the coordinator
// sends is safe to repeat (etcd_client.cc, Retriable).
class EtcdClient {
 public:
  struct Options {
    std::vector<std::string> endpoints;  // HOST:PORT of etcd members.
    // Longer than etcd's re-election stall (about 1.5 s) so that losing
    // etcd's leader fails no call; short enough that a lost quorum answers
    // UNAVAILABLE promptly.
    absl::Duration call_timeout = absl::Seconds(3);
    // null: plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Set: etcd's authentication is on. Every call carries the token
    // Auth.Authenticate gave for this user, as etcd's "token" metadata; a
    // token etcd no longer knows (it expired, or the member that took the
    // call restarted) is replaced and the call sent again.
    // (Initialised, so that callers may brace-initialise the fields above
    // only.)
    std::string user = {};
    std::string password = {};  // Never logged.
    // Set: asked for the password again before each authentication (a new
    // token), so that a rotated password is taken without a restart. Its
    // answer is tried first, then the last password etcd accepted, so that
    // either order of "the file changed" and "etcd's user changed" keeps
    // working; an error (a file being rewritten) is logged and skipped.
    std::function<absl::StatusOr<std::string>()> read_password = {};
  };

  explicit EtcdClient(Options options);
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  absl::Duration call_timeout() const { return options_.call_timeout; }

  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(int64_t ttl_s);
  absl::Status LeaseRevoke(int64_t lease);

  // One keepalive round trip for `lease` on a stream of its own; `sent` is
  // set (steady clock) right before the request leaves. The response's TTL
  // is 0 when the lease no longer exists.
  absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> KeepAliveOnce(
      int64_t lease, std::chrono::steady_clock::time_point* sent);

  // Watches `key` from `start_revision` until an event of `type` arrives
  // (returned), `deadline` passes (DEADLINE_EXCEEDED) or CancelInFlight()
  // (CANCELLED). A compacted start revision answers OUT_OF_RANGE: range again.
  absl::StatusOr<mvccpb::Event> AwaitEvent(absl::string_view key,
                                           int64_t start_revision,
                                           mvccpb::Event::EventType type,
                                           absl::Time deadline);

  // One linearizable read of `key` through the endpoints (authenticating
  // first when a user is set), as a starting node checks etcd before it
  // campaigns: a key of its own cluster, so that the user's role is checked
  // too. OK when etcd answered or could not answer now (down, no quorum:
  // logged); when etcd refused this node (EtcdRefusedAccess),
  // UNAUTHENTICATED or PERMISSION_DENIED "etcd refuses this node (...)"
  // naming the flags to check.
  absl::Status CheckAccess(absl::string_view key);

  // Ends every call in flight with CANCELLED (a stopping coordinator's
  // watches); later calls run as usual.
  void CancelInFlight();

 private:
  // One attempt's context: deadline, "hasleader", registered for
  // CancelInFlight().
  class Call;

  // Runs `attempt` on the current endpoint and then the next ones while the
  // failure is safe to retry and time is left; with a user, under a token
  // (renewed once per call when etcd refuses it). `authenticated` false:
  // no token (Authenticate itself).
  template <typename Response, typename Attempt>
  absl::StatusOr<Response> Unary(absl::string_view what, Attempt attempt,
                                 bool authenticated = true);
  // The token to send: the one held, else a new one from etcd ("" without
  // a user).
  absl::StatusOr<std::string> Token();
  // Forgets `stale` (etcd refused it) unless another call renewed it.
  void DropToken(const std::string& stale);

  // One watch under `token`; `token_refused` is set when etcd cancelled it
  // for the token (unknown to it, or without the rights).
  absl::StatusOr<mvccpb::Event> WatchOnce(absl::string_view key,
                                          int64_t start_revision,
                                          mvccpb::Event::EventType type,
                                          absl::Time deadline,
                                          const std::string& token,
                                          bool* token_refused);

  std::shared_ptr<grpc::Channel> Channel(int endpoint) const;
  // After a failure that may be the connection's: the next call to
  // `endpoint` goes over a new channel. gRPC 1.51's pick_first leaves a
  // channel whose first connects were refused failing fast long after the
  // member is up again (its subchannel waits to be asked to reconnect);
  // a new channel connects at once.
  void Reconnect(int endpoint, const std::shared_ptr<grpc::Channel>& failed);
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint) const;
  int current() const;
  void Rotate(int failed);

  const Options options_;

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  int current_ ABSL_GUARDED_BY(mu_) = 0;
  std::string token_ ABSL_GUARDED_BY(mu_);
  // The password etcd last accepted (at first, the one given).
  std::string password_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
};

// UNAVAILABLE "coordinator has no quorum: <why>".
absl::Status NoQuorumError(absl::string_view why);

// Whether a failure means etcd will not take this node as configured: it
// refused the user or password or the token's rights (UNAUTHENTICATED,
// PERMISSION_DENIED), or the TLS handshake failed (a missing or untrusted
// client certificate, a server certificate the CA does not sign, TLS on one
// side only; also a member that closed an accepted connection at once, which
// is how gRPC reports most of these). Waiting does not mend these; a
// starting node stops.
bool EtcdRefusedAccess(const absl::Status& status);

// Whether a failed call's answer came from etcd itself saying it has no
// leader (a member that lost its quorum), not from a member that could not
// be reached: only the former proves that nobody can be elected meanwhile.
bool EtcdHasNoLeader(const absl::Status& status);

// The first key after every key that starts with `prefix` (etcd's
// range_end for a prefix range).
std::string PrefixEnd(absl::string_view prefix);

}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_ETCD_CLIENT_H_
