#ifndef SUMMON_CORE_PLAN_H_
#define SUMMON_CORE_PLAN_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_spec.h"
#include "core/scope.h"

namespace summon::core {

// One full tensor of a session, placed in the session buffer.
struct SessionTensor {
  std::string fqn;
  ParamLocation location;
  Shape shape;
  DType dtype = DType::kFloat32;
  int64_t numel = 0;
  int64_t buffer_offset = 0;  // Bytes from the start of the session buffer.
  int64_t bytes() const {
    return numel * static_cast<int64_t>(ElementSize(dtype));
  }
};

// The session buffer: the scoped parameters back to back in scope order,
// each full-shape in its stored dtype, each start 64-byte aligned. Padding is
// never part of it: only the bytes of scoped parameters are gathered.
struct SessionBufferLayout {
  std::vector<SessionTensor> tensors;
  int64_t total_bytes = 0;

  // Index in `tensors` of `fqn` (a primary FQN), or -1.
  int Find(absl::string_view fqn) const;
};

SessionBufferLayout LayoutSessionBuffer(const ModelSpec& model,
                                        const Scope& scope);

// Where a session's physical copies live (docs/design.md#placement).
enum class Placement {
  kEveryRank,  // One copy per rank (a GPU each on GPU nodes).
  kPerNode,    // One host copy per node (CPU nodes, offload_to_cpu).
  kHomeRank,   // Only the home rank's domain (rank0_only).
};

struct SessionCopy {
  int node = 0;
  int rank = -1;  // The rank whose domain holds it; -1 for node host memory.
};

// A contiguous byte range moved between a rank's shard of one unit and one
// copy of the session buffer. For a gather the shard is the source; for a
// writeback it is the destination.
struct Transfer {
  int rank = 0;
  int unit = 0;
  int64_t shard_offset = 0;   // Bytes into `rank`'s shard of `unit`.
  int copy = 0;               // Index into the plan's copies.
  int64_t buffer_offset = 0;  // Bytes into that copy's session buffer.
  int64_t bytes = 0;
};

// Per rank, which byte ranges of its shards go to which offsets of which
// copies. Each byte of every copy's tensors is written by exactly one
// transfer; sources prefer the copy's own rank, then its node, so replicated
// strategies gather without crossing nodes when they can.
struct GatherPlan {
  std::vector<SessionCopy> copies;
  std::vector<Transfer> transfers;  // Ordered by (copy, buffer_offset).
};

// The inverse: every rank that holds a slice of a scoped parameter (every
// replica under NO_SHARD and the hybrid strategies) receives its owned
// slice from the nearest copy. Padding is never a destination.
struct WritebackPlan {
  std::vector<Transfer> transfers;  // Ordered by (rank, unit, shard_offset).
};

// The nodes of the topology a plan may not use fully (a cluster formed on
// its survivors, docs/architecture.md "Many nodes"). `absent`: not in the
// cluster, so no copy is placed there, no rank there is a source, and no
// rank there receives a writeback. `stale`: in the cluster but catching up
// (its shards may be older than a replica's), so it holds a copy and
// receives writebacks but is never a source. Every node of a cluster plans
// with the same sets.
struct NodeSets {
  std::set<int> absent;
  std::set<int> stale;
  bool empty() const { return absent.empty() && stale.empty(); }
};

// INVALID_ARGUMENT when home_rank is outside the world (only kHomeRank uses
// it). UNAVAILABLE, naming the rank and its node, when a shard position has
// no holder outside `nodes.absent` and `nodes.stale`, or the home rank's
// node is absent.
absl::StatusOr<GatherPlan> PlanGather(const ModelSpec& model,
                                      const SessionBufferLayout& buffer,
                                      Placement placement, int home_rank,
                                      const NodeSets& nodes = {});

// Ranks on `absent` nodes receive nothing.
WritebackPlan PlanWriteback(const ModelSpec& model,
                            const SessionBufferLayout& buffer,
                            const GatherPlan& gather,
                            const std::set<int>& absent = {});

// A range of one rank's shard of one unit: rank, unit, byte offset, bytes.
using ShardRange = std::tuple<int, int, int64_t, int64_t>;

// What each node sends for a gather: the distinct shard ranges of its ranks
// that a copy on another node needs, in one deterministic order that every
// node computes alike (the node runtimes' exchange buffers).
std::vector<std::vector<ShardRange>> RangesSentByNode(const ModelSpec& model,
                                                      const GatherPlan& plan);
int64_t RangesBytes(const std::vector<ShardRange>& ranges);

// Whether the exchange buffer (every node's RangesSentByNode concatenated in
// node order) is, byte for byte, where copy `copy` of the session buffer
// wants those ranges: then a node receives its peers' ranges straight into
// its copy and sends its own from it in place, with no packing or unpacking
// pass. True for a single-parameter unit sharded over the nodes in order
// with one copy per node (FULL_SHARD); false where alignment gaps, a
// strategy's order or a home node that sends nothing break it.
bool ExchangeLandsInCopy(const ModelSpec& model, const GatherPlan& plan,
                         int copy);

// Bytes a gather puts on the network: each node's ranges go to every other
// node holding a copy (one allgatherv for per-node copies, a gather to the
// home node for a single copy). 0 on one node and when every shard group
// lies within a node.
int64_t GatherNetworkBytes(const ModelSpec& model, const GatherPlan& plan);

// Bytes a node must hold for the copies placed on it (rule R9's input).
std::vector<int64_t> CopyBytesPerNode(const ModelSpec& model,
                                      const SessionBufferLayout& buffer,
                                      const GatherPlan& gather);

// Bytes that cross from one node to another when the plan runs.
int64_t CrossNodeBytes(const ModelSpec& model,
                       const std::vector<SessionCopy>& copies,
                       const std::vector<Transfer>& transfers);

// Runs transfers as plain memcpys when every shard and copy is addressable
// from here (the local ranks of one node). The callbacks return the base
// address of (rank, unit)'s shard and of a copy's buffer.
using ShardAddress = std::function<uint8_t*(int rank, int unit)>;
using CopyAddress = std::function<uint8_t*(int copy)>;
using ConstCopyAddress = std::function<const uint8_t*(int copy)>;
void ExecuteGather(const std::vector<Transfer>& transfers,
                   const ShardAddress& shard, const CopyAddress& copy);
void ExecuteWriteback(const std::vector<Transfer>& transfers,
                      const ShardAddress& shard, const ConstCopyAddress& copy);

}  // namespace summon::core

#endif  // SUMMON_CORE_PLAN_H_
