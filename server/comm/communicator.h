#ifndef SUMMON_SERVER_COMM_COMMUNICATOR_H_
#define SUMMON_SERVER_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace summon::server {

// Options of one collective operation, in gloo's style.
struct CollectiveOptions {
  // Tells the messages of different operations apart: the operation's number
  // in the leader's global order (docs/design.md#how-nodes-work-together).
  // Every rank passes the same tag for the same operation.
  uint64_t tag = 0;
  // Bound on the operation's waits; DEADLINE_EXCEEDED when a peer does not
  // take part in time. Must be positive and finite.
  absl::Duration timeout = absl::Seconds(30);
};

// Moves raw bytes between the nodes of a cluster: one rank per summond (a
// communicator rank is a node, not a model rank). Every rank calls the same
// operations in the same order with consistent sizes; the leader's sequence
// numbers give that order. Buffers are host memory for the CPU backends and
// device memory for NCCL. Byte counts are per rank, so uneven (and zero)
// contributions need no padding.
//
// Errors: INVALID_ARGUMENT for inconsistent sizes, a bad root, a null buffer
// with a non-zero size or a bad timeout (nothing is sent); DEADLINE_EXCEEDED
// when peers do not take part in time; UNAVAILABLE when a peer failed or an
// earlier failure broke the communicator (re-create it: it refuses every
// later operation); ABORTED once Abort() was called.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank contributes `send_bytes` (== recv_bytes_per_rank[rank()]) and
  // receives every rank's contribution, concatenated in rank order, in `recv`
  // (the sum of recv_bytes_per_rank). `send` may point at this rank's slot of
  // `recv` (in place).
  virtual absl::Status AllGatherV(
      const void* send, int64_t send_bytes, void* recv,
      const std::vector<int64_t>& recv_bytes_per_rank,
      const CollectiveOptions& options) = 0;

  // An all-gather in place whose ranks' bytes need not be adjacent: rank
  // r's `bytes[r]` sit at `buffer + offsets[r]` (slots must not overlap);
  // this rank sends its own from there and every other rank's land there.
  // Host memory only. One operation may run as several parts (`part` 0 to
  // 255, the same tag, called in order on every rank) so that a caller
  // fills the next part's bytes while this one moves (NodeRuntime's
  // pipelined gather). The default bounces through a contiguous buffer and
  // AllGatherV (a copy each way); Gloo sends and receives in place.
  virtual absl::Status AllGatherAt(void* buffer,
                                   const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& bytes, int part,
                                   const CollectiveOptions& options);

  // Where each rank's bytes of one part of AllGatherAtParts sit (as
  // AllGatherAt's offsets and bytes).
  struct GatherPart {
    std::vector<int64_t> offsets;
    std::vector<int64_t> bytes;
  };
  // AllGatherAt's parts (at most 256) as one operation that streams: this
  // rank's bytes of part k are sent as soon as `ready(k)` returns OK (the
  // caller fills them meanwhile, e.g. on another thread), while the other
  // ranks' parts arrive. `ready` is called on the calling thread in part
  // order. Gloo posts every part's receives first, so part k+1 follows
  // part k on the wire with no round trip between them; the default runs
  // ready(k) then AllGatherAt(part k), part by part. An error from
  // `ready(k)` is returned as it is and nothing more is sent; Gloo, whose
  // receives are posted, closes its connections (peers fail at once) and
  // must be re-created (UNAVAILABLE afterwards), as after any failed
  // collective.
  virtual absl::Status AllGatherAtParts(
      void* buffer, const std::vector<GatherPart>& parts,
      const std::function<absl::Status(int part)>& ready,
      const CollectiveOptions& options);

  // Like AllGatherV, but only `root` receives; `recv` is used on the root
  // only (other ranks may pass nullptr).
  virtual absl::Status Gather(const void* send, int64_t send_bytes, void* recv,
                              const std::vector<int64_t>& recv_bytes_per_rank,
                              int root, const CollectiveOptions& options) = 0;

  // The inverse of Gather: `root` holds every rank's slice concatenated in
  // rank order in `send` (used on the root only) and each rank receives
  // `recv_bytes` (== send_bytes_per_rank[rank()]) in `recv`.
  virtual absl::Status Scatter(const void* send,
                               const std::vector<int64_t>& send_bytes_per_rank,
                               void* recv, int64_t recv_bytes, int root,
                               const CollectiveOptions& options) = 0;

  // Copies `bytes` from root's `buffer` into every other rank's `buffer`.
  virtual absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                                 const CollectiveOptions& options) = 0;

  // Returns once every rank has entered the barrier.
  virtual absl::Status Barrier(const CollectiveOptions& options) = 0;

  // Fails the operation in flight and every later one with ABORTED. Where
  // the backend can, it also closes the connections so that peers blocked on
  // this rank fail promptly instead of waiting for their timeout. Safe to
  // call from any thread, any number of times.
  virtual void Abort() = 0;
};

// Builds one node's communicator for session copies in device memory
// through the cluster's rendezvous store: rank `rank` of `size`, connected
// within `timeout`. NCCL on GPU nodes (buffers on the node's first GPU);
// tests give Gloo over the fake device's memory.
using DeviceCommunicatorFactory =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
        int rank, int size, absl::Duration timeout,
        gloo::rendezvous::Store& store)>;

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_COMMUNICATOR_H_
