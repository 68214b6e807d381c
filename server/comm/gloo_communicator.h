#ifndef SUMMON_SERVER_COMM_GLOO_COMMUNICATOR_H_
#define SUMMON_SERVER_COMM_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace summon::server {

// A Communicator over Gloo's TCP transport (Debian's libgloo, 2022-05): a
// full mesh of connections between the nodes, formed through a rendezvous
// store. AllGatherV, Broadcast and Barrier are Gloo's algorithms; Gather and
// Scatter are Gloo-style point-to-point exchanges with the root, because this
// Gloo's gather/scatter need equal sizes on every rank and it has no
// gatherv/scatterv.
//
// Operations run one at a time, in call order. The options' timeout bounds
// each wait of an operation (Gloo's semantics: a ring step, a message from
// the root). Only the low 32 bits of the tag reach the wire (Gloo's slots);
// operations never overlap here, so tags need only differ from the previous
// operation's.
//
// Any failure breaks the connections (Gloo closes every pair when a wait
// times out): the communicator then refuses every operation with UNAVAILABLE
// and must be re-created, with a fresh rendezvous prefix.
class GlooCommunicator final : public Communicator {
 public:
  struct Spec {
    int rank = 0;
    int size = 1;
    // The address this node listens on and advertises to its peers (an IP
    // address or a host name resolving to one of this node's interfaces).
    std::string hostname = "127.0.0.1";
    // Bounds the rendezvous and connecting to every peer.
    absl::Duration connect_timeout = absl::Seconds(30);
  };

  // Publishes this rank's addresses in `store`, reads its peers' and
  // connects to each; returns once every rank of `spec.size` has done the
  // same. INVALID_ARGUMENT for a bad spec; DEADLINE_EXCEEDED when some rank
  // does not show up within connect_timeout; UNAVAILABLE on transport errors.
  // `store` is only used during the call.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      const Spec& spec, gloo::rendezvous::Store& store);

  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllGatherV(const void* send, int64_t send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes_per_rank,
                          const CollectiveOptions& options) override;
  // Sends this rank's slot to every peer and receives theirs, straight
  // from and into `buffer` (no copies).
  absl::Status AllGatherAt(void* buffer, const std::vector<int64_t>& offsets,
                           const std::vector<int64_t>& bytes, int part,
                           const CollectiveOptions& options) override;
  // Every part's receives are posted before the first send; each part's
  // sends follow its ready() at once.
  absl::Status AllGatherAtParts(
      void* buffer, const std::vector<GatherPart>& parts,
      const std::function<absl::Status(int part)>& ready,
      const CollectiveOptions& options) override;
  absl::Status Gather(const void* send, int64_t send_bytes, void* recv,
                      const std::vector<int64_t>& recv_bytes_per_rank, int root,
                      const CollectiveOptions& options) override;
  absl::Status Scatter(const void* send,
                       const std::vector<int64_t>& send_bytes_per_rank,
                       void* recv, int64_t recv_bytes, int root,
                       const CollectiveOptions& options) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                         const CollectiveOptions& options) override;
  absl::Status Barrier(const CollectiveOptions& options) override;

  // Hard-closes every connection (peers blocked on this rank see a reset
  // and fail at once) and wakes this rank's operation in flight: it returns
  // ABORTED promptly, at the latest after its timeout.
  void Abort() override;

 private:
  class WatchedBuffer;

  explicit GlooCommunicator(std::shared_ptr<gloo::Context> context);

  // Runs one operation: refuses it when aborted or broken, otherwise calls
  // `body` (false: one of its waits was woken by Abort) and turns a Gloo
  // exception into a status, marking the communicator broken.
  absl::Status Run(absl::string_view name, const CollectiveOptions& options,
                   absl::FunctionRef<bool()> body);
  absl::Status Usable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AllGatherAt and AllGatherAtParts (checked): `parts` on the slots
  // first_part, first_part + 1, ... of the tag; ready(k) (when given)
  // before part k's sends.
  absl::Status StreamParts(absl::string_view name, void* buffer,
                           const std::vector<GatherPart>& parts, int first_part,
                           const std::function<absl::Status(int part)>& ready,
                           const CollectiveOptions& options);

  const std::shared_ptr<gloo::Context> context_;
  const int rank_;
  const int size_;
  // Held for a whole operation: one at a time.
  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // The failure that broke the connections; OK while they are usable.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Buffers the operation in flight waits on, for Abort to wake.
  std::vector<gloo::transport::UnboundBuffer*> waited_on_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_GLOO_COMMUNICATOR_H_
