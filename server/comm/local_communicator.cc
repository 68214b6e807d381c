#include "server/comm/local_communicator.h"

#include "server/comm/collective_args.h"

namespace summon::server {

absl::Status LocalCommunicator::CheckNotAborted() const {
  if (aborted_) return absl::AbortedError("communicator was aborted");
  return absl::OkStatus();
}

absl::Status LocalCommunicator::AllGatherV(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices = CheckAllGatherV(
      *this, send, send_bytes, recv, recv_bytes_per_rank, options);
  if (!slices.ok()) return slices.status();
  CopyHostBytes(recv, send, send_bytes);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Gather(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices = CheckGather(
      *this, send, send_bytes, recv, recv_bytes_per_rank, root, options);
  if (!slices.ok()) return slices.status();
  CopyHostBytes(recv, send, send_bytes);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Scatter(
    const void* send, const std::vector<int64_t>& send_bytes_per_rank,
    void* recv, int64_t recv_bytes, int root,
    const CollectiveOptions& options) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices = CheckScatter(
      *this, send, send_bytes_per_rank, recv, recv_bytes, root, options);
  if (!slices.ok()) return slices.status();
  CopyHostBytes(recv, send, recv_bytes);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Broadcast(void* buffer, int64_t bytes, int root,
                                          const CollectiveOptions& options) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  return CheckBroadcast(*this, buffer, bytes, root, options);
}

absl::Status LocalCommunicator::Barrier(const CollectiveOptions& options) {
  if (absl::Status s = CheckNotAborted(); !s.ok()) return s;
  return CheckBarrier(options);
}

}  // namespace summon::server
