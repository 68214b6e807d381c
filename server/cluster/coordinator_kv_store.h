#ifndef SUMMON_SERVER_CLUSTER_COORDINATOR_KV_STORE_H_
#define SUMMON_SERVER_CLUSTER_COORDINATOR_KV_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/cluster/kv_store.h"
#include "server/coordinator/coordinator.h"

namespace summon::server {

// The cluster's rendezvous key-value store on the coordinator (etcd), for
// one epoch: what RendezvousStore gives Gloo and NCCL instead of the
// leader's in-memory store, so the rendezvous survives any node. Keys live
// under rdzv/<epoch>/ and every Set is fenced by the epoch: a node of a
// deposed epoch cannot publish an address into a later epoch's rendezvous
// (ABORTED), and a re-formed cluster never reads an earlier epoch's keys.
class CoordinatorKvStore final : public KvStore {
 public:
  CoordinatorKvStore(Coordinator& coordinator, uint64_t epoch)
      : coordinator_(coordinator), epoch_(epoch) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  Coordinator& coordinator_;
  const uint64_t epoch_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_CLUSTER_COORDINATOR_KV_STORE_H_
