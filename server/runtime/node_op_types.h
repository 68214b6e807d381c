#ifndef SUMMON_SERVER_RUNTIME_NODE_OP_TYPES_H_
#define SUMMON_SERVER_RUNTIME_NODE_OP_TYPES_H_

// What a session asks of a node: the records of the operations the session
// manager sends to every node's runtime (gather, write, the writeback's
// PREPARE and COMMIT), a copy handed to a same-host client and the sink a
// read streams into. Plain data, shared by the runtime, the session
// manager's NodeOps and the Peer service's conversions.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/scope.h"

namespace summon::server {

// Everything a node needs to compute a gather's plan exactly as every other
// node does: the plan is a pure function of the model and these fields.
struct GatherOp {
  uint64_t sequence = 0;  // The leader's global order of collectives.
  std::string gather_id;
  std::string model;
  core::ScopeRequest scope;
  bool rank0_only = false;  // One copy on the home rank's node, else one per
  int home_rank = 0;        // node.
  bool grads = false;       // The session has a gradients buffer.
  // No session writes into the copy (read-only sessions write into their
  // own private copies): reads then hand its bytes on pinned and without
  // holding the copy's lock. Not sent to peers, which keep the default.
  bool read_only = false;
  // The session asked for its copies in host memory. Otherwise a model whose
  // shards are in device memory gets its copies there too
  // (docs/design.md#placement); host-placed models always use host memory.
  bool offload_to_cpu = false;
  // Nodes whose ranks are never a source (their shards are catching up from
  // a replica after they came back, core::NodeSets::stale).
  std::vector<int> stale_nodes;
  // The cluster epoch `sequence` was numbered in (0: a single node): it is
  // sent as the operation's epoch, so a node of a later epoch refuses it
  // instead of running it under that epoch's numbers (a stale collective
  // whose tag another operation reuses).
  uint64_t epoch = 0;
};

// A write into the copies of a gather. `private_copy`: the session does not
// own the gather (read-only, possibly shared), so the write lands in that
// session's own copy of the tensor.
struct WriteOp {
  std::string gather_id;
  std::string session_id;
  bool private_copy = false;
  int tensor = 0;
  bool grad = false;
  int64_t element_offset = 0;
  int64_t element_size = 1;  // Of the tensor's dtype, to split large writes.
  std::string bytes;
};

// PREPARE of a two-phase writeback: every node stages its ranks' owned
// slices (from its own copy, or scattered from the home) and checks that
// the units did not move since the gather (R7, unless `force`).
struct PrepareOp {
  uint64_t sequence = 0;
  std::string gather_id;
  std::string session_id;
  std::map<int, uint64_t> expected_generations;  // Unit -> at gather.
  std::map<int, uint64_t> target_generations;    // Unit -> after commit.
  bool force = false;
  uint64_t epoch = 0;  // As GatherOp::epoch.
};

// COMMIT: staged data goes into the shards and every scoped unit takes its
// target generation, on every node alike.
struct CommitOp {
  // 0: out of order, for commits decided before a failure and finished
  // while the cluster re-forms.
  uint64_t sequence = 0;
  std::string model;
  std::string gather_id;
  std::string session_id;
  std::map<int, uint64_t> target_generations;
  uint64_t epoch = 0;  // As GatherOp::epoch.
};

// A generation move outside a writeback (R7, R23): an optimizer step, the
// end of init external (Trainer.MarkInitialized), an optimizer step cut
// short by a lapsed lease. Every node sets each unit's generation to the
// value the leader chose, in sequence order, so a PREPARE on any node
// compares against the same generation as the leader. External-write
// counters stay (R18: a step and an init are the trainer's own writes).
struct GenerationsOp {
  uint64_t sequence = 0;
  std::string model;
  std::map<int, uint64_t> generations;  // Unit -> its new generation.
  // Ends init external on the node too: the model leaves AWAITING_INIT
  // (recorded in the node's data dir), so MapShards and a restart agree.
  bool initialized = false;
  uint64_t epoch = 0;  // As GatherOp::epoch.
};

// A copy held on this node, handed to a client on its host (MapSession):
// a host copy as a read-only descriptor, a device copy as the CUDA IPC
// handle of each GPU's copy.
struct LocalCopyShare {
  int fd = -1;  // Host copy: owned by the receiver; -1 for a device copy.
  struct DeviceCopy {
    int device = -1;         // CUDA ordinal.
    std::vector<int> ranks;  // This node's ranks on that GPU.
    std::string ipc_handle;  // cudaIpcMemHandle_t bytes.
  };
  std::vector<DeviceCopy> device_copies;  // By device; empty for a host copy.
};

// Receives a read in chunks; returning false stops the read (client gone).
// `bytes` are valid during the call. A non-null `pin` says they are the
// shared copy of a read-only gather (GatherOp::read_only), unconverted,
// which nothing changes, and keeps that memory mapped (not reused by
// another gather) while any copy of the pin is held: the sink may hand the
// bytes on without copying them. Pinned chunks are handed over without the
// copy's lock held, so a slow reader never holds up another.
using ChunkSink =
    std::function<bool(int64_t element_offset, absl::string_view bytes,
                       const std::shared_ptr<const void>& pin)>;

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_NODE_OP_TYPES_H_
