#ifndef SUMMON_SERVER_TESTING_GLOO_TEST_RENDEZVOUS_H_
#define SUMMON_SERVER_TESTING_GLOO_TEST_RENDEZVOUS_H_

// The rendezvous of a test cluster of GlooCommunicators, for the Gloo
// tests of server/comm/ (collectives and failures).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gtest/gtest.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/rendezvous_store.h"
#include "server/comm/gloo_communicator.h"
#include "server/testing/comm_patterns.h"
#include "server/testing/kv_store_test_server.h"

namespace summon::server::gloo_testing {

enum class StoreKind { kInMemory, kGrpc };

constexpr absl::Duration kTimeout = absl::Seconds(5);

CollectiveOptions Options(uint64_t tag, absl::Duration timeout = kTimeout) {
  return CollectiveOptions{tag, timeout};
}

// The rendezvous of one test cluster: Gloo's in-memory HashStore, or the
// leader's store served over gRPC with a RemoteKvStore per rank (what
// summond does).
class TestRendezvous {
 public:
  explicit TestRendezvous(StoreKind kind) : kind_(kind) {
    if (kind_ == StoreKind::kGrpc) {
      absl::StatusOr<std::unique_ptr<KvStoreTestServer>> started =
          KvStoreTestServer::Start();
      EXPECT_TRUE(started.ok()) << started.status();
      if (started.ok()) leader_ = *std::move(started);
    }
  }

  // Forms a communicator of `size` ranks, one thread per rank, under the
  // cluster incarnation `prefix`. Empty when some rank failed.
  std::vector<std::unique_ptr<GlooCommunicator>> Connect(
      int size, const std::string& prefix,
      absl::Duration connect_timeout = kTimeout) {
    std::vector<gloo::rendezvous::Store*> stores;
    for (int rank = 0; rank < size; ++rank) stores.push_back(&NewStore(prefix));
    std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> created;
    for (int rank = 0; rank < size; ++rank) {
      created.emplace_back(absl::UnknownError("not run"));
    }
    RunOnRanks(size, [&](int rank) {
      created[rank] = GlooCommunicator::Create(
          {rank, size, "127.0.0.1", connect_timeout}, *stores[rank]);
    });
    std::vector<std::unique_ptr<GlooCommunicator>> comms;
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_TRUE(created[rank].ok())
          << "rank " << rank << ": " << created[rank].status();
      if (!created[rank].ok()) return {};
      comms.push_back(*std::move(created[rank]));
    }
    return comms;
  }

  // A store for one rank of incarnation `prefix`.
  gloo::rendezvous::Store& NewStore(const std::string& prefix) {
    if (kind_ == StoreKind::kInMemory) {
      stores_.push_back(
          std::make_unique<gloo::rendezvous::PrefixStore>(prefix, hash_store_));
    } else {
      clients_.push_back(
          std::make_unique<RemoteKvStore>(leader_->NewChannel()));
      stores_.push_back(std::make_unique<RendezvousStore>(*clients_.back(),
                                                          prefix, kTimeout));
    }
    return *stores_.back();
  }

 private:
  const StoreKind kind_;
  gloo::rendezvous::HashStore hash_store_;
  std::unique_ptr<KvStoreTestServer> leader_;
  std::vector<std::unique_ptr<KvStore>> clients_;
  std::vector<std::unique_ptr<gloo::rendezvous::Store>> stores_;
};

}  // namespace summon::server::gloo_testing

#endif  // SUMMON_SERVER_TESTING_GLOO_TEST_RENDEZVOUS_H_
