#ifndef SUMMON_SERVER_CLUSTER_KV_STORE_H_
#define SUMMON_SERVER_CLUSTER_KV_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {

// The cluster's rendezvous key-value store (docs/design.md#how-nodes-work-together). The leader
// holds the data (LocalKvStore); every node reaches it through this interface:
// the leader in process, the others over the Peer service (RemoteKvStore).
// Values are raw bytes (Gloo's transport addresses, NCCL's unique id). Keys
// are not namespaced here: callers put a cluster incarnation prefix in front
// (see RendezvousStore) so a re-formed cluster never reads stale keys.
class KvStore {
 public:
  virtual ~KvStore() = default;

  // Sets `key`, replacing any value, and wakes whoever waits for it.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set. A zero (or
  // negative) timeout looks once: NOT_FOUND when absent. DEADLINE_EXCEEDED
  // when it does not appear in time; UNAVAILABLE when the store is closed or
  // cannot be reached.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;
  // Waits until every key in `keys` exists. DEADLINE_EXCEEDED (naming the
  // missing keys) when they do not all appear within `timeout`.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;
};

// The leader's store: in memory, thread-safe; waits block on the mutex until
// the keys appear, the timeout passes or the store is closed.
class LocalKvStore final : public KvStore {
 public:
  LocalKvStore() = default;
  LocalKvStore(const LocalKvStore&) = delete;
  LocalKvStore& operator=(const LocalKvStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

  // Drops every key that starts with `prefix` (an earlier cluster
  // incarnation's) and returns how many there were.
  int ErasePrefix(absl::string_view prefix);
  // Wakes every waiter with UNAVAILABLE and refuses later calls, so a
  // shutting-down leader does not hold RPCs for their whole timeout.
  void Close();

 private:
  // Waits until every key exists (or closed / deadline) and returns why it
  // stopped waiting.
  absl::Status AwaitKeys(const std::vector<std::string>& keys,
                         absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Ordered so that ErasePrefix is a range erase.
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// A node's view of the leader's store, over the leader's Peer service.
// Calls wait for the channel to connect (a follower may start before the
// leader), bounded by `rpc_timeout` beyond the wait's own timeout.
class RemoteKvStore final : public KvStore {
 public:
  explicit RemoteKvStore(std::shared_ptr<grpc::Channel> leader,
                         absl::Duration rpc_timeout = absl::Seconds(10));

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  std::unique_ptr<summon::v1::Peer::Stub> stub_;
  absl::Duration rpc_timeout_;
};

// Serves the Peer service's Store* RPCs from a LocalKvStore; every other Peer
// RPC answers UNIMPLEMENTED. The leader's Peer service derives from this class
// (overriding the other RPCs), so the store is registered with the daemon's
// one Peer service. A wait is bounded by the request's timeout_ms and by the
// call's own deadline, whichever comes first.
class KvStoreService : public summon::v1::Peer::Service {
 public:
  explicit KvStoreService(LocalKvStore& store) : store_(store) {}

  grpc::Status StoreSet(grpc::ServerContext* context,
                        const summon::v1::StoreSetRequest* request,
                        summon::v1::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context,
                        const summon::v1::StoreGetRequest* request,
                        summon::v1::StoreGetResponse* response) override;
  grpc::Status StoreWait(grpc::ServerContext* context,
                         const summon::v1::StoreWaitRequest* request,
                         summon::v1::StoreWaitResponse* response) override;

 private:
  LocalKvStore& store_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_CLUSTER_KV_STORE_H_
