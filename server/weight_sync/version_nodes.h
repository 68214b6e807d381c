#ifndef SUMMON_SERVER_WEIGHT_SYNC_VERSION_NODES_H_
#define SUMMON_SERVER_WEIGHT_SYNC_VERSION_NODES_H_

// What weight sync asks of the cluster's nodes: every node's snapshot of a
// version (the leader's Publish), and pieces of another node's snapshot (a
// reader's). One implementation per deployment: this node alone, or the
// cluster over the Peer service (service/cluster_version_nodes.h).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "server/weight_sync/slice_plan.h"
#include "server/weight_sync/version_store.h"

namespace summon::server {

class VersionNodes {
 public:
  virtual ~VersionNodes() = default;
  // Every node takes its snapshot; the bytes of all of them together. The
  // first failure, naming its node. `copy_ahead`: VersionStore::Take's.
  virtual absl::StatusOr<int64_t> PublishEverywhere(const std::string& model,
                                                    int64_t version,
                                                    bool copy_ahead) = 0;
  // `pieces` (all of ranks on `node`) converted to `dtype` there, each
  // received straight into its place: out + dest_element * element size
  // (no staging copy).
  virtual absl::Status ReadRemote(int node, const std::string& model,
                                  int64_t version, core::DType dtype,
                                  const std::vector<VersionPiece>& pieces,
                                  uint8_t* out) = 0;
};

// A single node: every rank is here, so nothing is ever remote.
class LocalVersionNodes : public VersionNodes {
 public:
  explicit LocalVersionNodes(VersionStore* store) : store_(store) {}
  absl::StatusOr<int64_t> PublishEverywhere(const std::string& model,
                                            int64_t version,
                                            bool copy_ahead) override {
    return store_->Take(model, version, copy_ahead);
  }
  absl::Status ReadRemote(int node, const std::string&, int64_t, core::DType,
                          const std::vector<VersionPiece>&,
                          uint8_t*) override {
    return absl::InternalError(
        absl::StrCat("a single node has no node ", node));
  }

 private:
  VersionStore* const store_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_VERSION_NODES_H_
