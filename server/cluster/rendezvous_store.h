#ifndef SUMMON_SERVER_CLUSTER_RENDEZVOUS_STORE_H_
#define SUMMON_SERVER_CLUSTER_RENDEZVOUS_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "server/cluster/kv_store.h"

namespace summon::server {

// Gloo's rendezvous store on top of the cluster's key-value store: the
// leader's LocalKvStore in process, or a RemoteKvStore reaching it over the
// Peer service. GlooCommunicator::Create publishes and reads transport
// addresses through it; NcclCommunicator::Create its unique id.
//
// Every key is stored as `prefix + key`. Give each cluster incarnation its
// own prefix (e.g. "summon/epoch-7/gloo/") so that a re-formed cluster never
// reads the addresses of an earlier one.
//
// Gloo's interface reports failures by exception: errors of the underlying
// store (a timeout, the leader unreachable) are thrown as gloo::IoException
// carrying the status.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and the wait() without a timeout of its own.
  RendezvousStore(KvStore& store, std::string prefix, absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key to be set.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const;

  KvStore& store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_CLUSTER_RENDEZVOUS_STORE_H_
