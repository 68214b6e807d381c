#ifndef SUMMON_SERVER_TESTING_LOOPBACK_VERSION_NODES_H_
#define SUMMON_SERVER_TESTING_LOOPBACK_VERSION_NODES_H_

// VersionNodes for a reader that counts its own node's ranks as another
// node's (WeightSync::Options::node set to a node that holds none): every
// "remote" fetch is served from this node's VersionStore, as the holding
// node's Peer.NodeReadVersion would, and recorded, so a test sees how a read
// was cut into fetches without a second daemon.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/weight_sync/version_nodes.h"

namespace summon::server {

class LoopbackVersionNodes : public VersionNodes {
 public:
  struct Call {
    int node = 0;
    core::DType dtype = core::DType::kFloat32;
    std::vector<VersionPiece> pieces;
  };

  explicit LoopbackVersionNodes(VersionStore* store) : store_(store) {}

  absl::StatusOr<int64_t> PublishEverywhere(const std::string& model,
                                            int64_t version,
                                            bool copy_ahead) override {
    return store_->Take(model, version, copy_ahead);
  }
  absl::Status ReadRemote(int node, const std::string& model, int64_t version,
                          core::DType dtype,
                          const std::vector<VersionPiece>& pieces,
                          uint8_t* out) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(Call{node, dtype, pieces});
    }
    absl::StatusOr<std::shared_ptr<const VersionSnapshot>> snapshot =
        store_->Acquire(model, version);
    if (!snapshot.ok()) return snapshot.status();
    return (*snapshot)->ReadPieces(pieces, dtype, /*scatter=*/true, out);
  }

  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  VersionStore* const store_;
  mutable absl::Mutex mu_;
  std::vector<Call> calls_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_LOOPBACK_VERSION_NODES_H_
