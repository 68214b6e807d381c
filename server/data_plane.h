#ifndef SUMMON_SERVER_DATA_PLANE_H_
#define SUMMON_SERVER_DATA_PLANE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "server/model_registry.h"

namespace summon::server {

// The bytes of one session copy held on this node: every scoped tensor back
// to back (core::SessionBufferLayout), and the same for gradients.
struct CopyBuffers {
  std::vector<uint8_t> params;
  std::vector<uint8_t> grads;  // Empty when the session has no gradients.
};

// Moves shard bytes into and out of session copies by the core's plans. The
// session manager decides what moves (rules, scope, placement); a data plane
// only moves it. LocalDataPlane does it with memcpys between the ranks of one
// node; a cluster data plane runs the same plans across nodes through a
// Communicator, each node executing its part in the leader's sequence.
class DataPlane {
 public:
  virtual ~DataPlane() = default;

  // Fills `copy` (already sized) from the shards. Ranks without gradient
  // shards contribute zeros to `copy.grads`.
  virtual absl::Status Gather(ModelEntry& model, const core::GatherPlan& plan,
                              CopyBuffers& copy) = 0;

  // Writes each owner's slice (every replica, never padding) from `copy`
  // into the shards; gradient slices only to ranks that have gradients.
  // Returns the bytes written.
  virtual absl::StatusOr<int64_t> Writeback(ModelEntry& model,
                                            const core::WritebackPlan& plan,
                                            const CopyBuffers& copy) = 0;
};

// One node, every rank's shards addressable here: plans run as memcpys under
// the model's shard lock (readers for gathers, writer for writebacks).
class LocalDataPlane final : public DataPlane {
 public:
  absl::Status Gather(ModelEntry& model, const core::GatherPlan& plan,
                      CopyBuffers& copy) override;
  absl::StatusOr<int64_t> Writeback(ModelEntry& model,
                                    const core::WritebackPlan& plan,
                                    const CopyBuffers& copy) override;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_DATA_PLANE_H_
