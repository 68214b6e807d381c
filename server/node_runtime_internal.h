#ifndef SUMMON_SERVER_NODE_RUNTIME_INTERNAL_H_
#define SUMMON_SERVER_NODE_RUNTIME_INTERNAL_H_

// NodeRuntime's record of a gather, shared by its two source files
// (node_runtime.cc: collectives; node_copies.cc: tensor access).

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/buffer_pool.h"
#include "server/node_runtime.h"

namespace summon::server {

// A gather as this node knows it: the plan (identical on every node) and,
// when the plan places a copy here, its bytes.
struct NodeRuntime::Copy {
  std::shared_ptr<ModelEntry> model;
  core::SessionBufferLayout layout;
  core::GatherPlan plan;
  int copy_index = -1;  // The plan's copy held on this node; -1: none.
  bool rank0_only = false;
  int home_node = 0;
  bool grads = false;
  bool read_only = false;  // GatherOp::read_only.

  absl::Mutex mu;
  PooledBuffer params ABSL_GUARDED_BY(mu);
  PooledBuffer grad_bytes ABSL_GUARDED_BY(mu);
  // (session, tensor, grad) -> that session's own copy of the tensor.
  std::map<std::tuple<std::string, int, bool>, std::vector<uint8_t>> privates
      ABSL_GUARDED_BY(mu);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_NODE_RUNTIME_INTERNAL_H_
