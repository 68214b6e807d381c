#ifndef SUMMON_SERVER_COMM_NCCL_COMMUNICATOR_H_
#define SUMMON_SERVER_COMM_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"

// The CUDA and NCCL handle types, so that including this header needs
// neither toolkit header.
struct ncclComm;
struct CUstream_st;

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace summon::server {

// A Communicator over NCCL for GPU clusters: one rank per GPU, buffers in
// device memory of that GPU. The communicator is non-blocking (NCCL's
// config.blocking = 0): every operation is enqueued on the communicator's own
// stream and polled until it completes, fails, is aborted or passes its
// timeout; then the communicator is aborted (ncclCommAbort) and refuses
// later operations.
//
// AllGatherV is ncclAllGather when every rank contributes the same number of
// bytes and one grouped ncclBroadcast per rank otherwise; Gather and Scatter
// are grouped ncclSend/ncclRecv with the root; Barrier is a one-element
// ncclAllReduce. Abort() stops this rank's operation within a poll interval;
// NCCL has no way to tell the peers, which fail at their own timeout.
class NcclCommunicator final : public Communicator {
 public:
  struct Spec {
    int rank = 0;
    int size = 1;
    // CUDA ordinal of this rank's GPU.
    int device = 0;
    // Bounds fetching the unique id from the store and NCCL's own setup.
    absl::Duration connect_timeout = absl::Seconds(30);
  };

  // Rank 0 creates NCCL's unique id and publishes it in `store`; the other
  // ranks read it there; then every rank joins the NCCL communicator.
  // UNAVAILABLE when there is no CUDA device (or driver) or NCCL fails;
  // INVALID_ARGUMENT for a bad spec; DEADLINE_EXCEEDED when the id or the
  // peers do not come within connect_timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const Spec& spec, gloo::rendezvous::Store& store);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllGatherV(const void* send, int64_t send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes_per_rank,
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
  void Abort() override;

 private:
  // An async device-to-device copy on this communicator's stream.
  absl::Status CopyOnDevice(void* dst, const void* src, int64_t bytes);
  NcclCommunicator(int rank, int size, int device, ncclComm* comm,
                   CUstream_st* stream, float* barrier_scratch);

  // Runs one operation: `enqueue` issues its CUDA and NCCL calls on stream_;
  // then polls until the stream is done, NCCL reports an error, Abort() is
  // called or the timeout passes.
  absl::Status Run(absl::string_view name, const CollectiveOptions& options,
                   absl::FunctionRef<absl::Status()> enqueue);
  // Polls until NCCL has finished the calls issued so far and the stream
  // has drained (OK), or why not.
  absl::Status AwaitCompletion(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void AbortComm() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);

  const int rank_;
  const int size_;
  const int device_;
  // Held for a whole operation: one at a time.
  absl::Mutex op_mu_;
  ncclComm* comm_ ABSL_GUARDED_BY(op_mu_);
  bool comm_aborted_ ABSL_GUARDED_BY(op_mu_) = false;
  // The failure that broke the communicator; OK while it is usable.
  absl::Status broken_ ABSL_GUARDED_BY(op_mu_);
  CUstream_st* const stream_;
  float* const barrier_scratch_;
  std::atomic<bool> aborted_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_NCCL_COMMUNICATOR_H_
