#ifndef SUMMON_SERVER_COMM_LOCAL_COMMUNICATOR_H_
#define SUMMON_SERVER_COMM_LOCAL_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "server/comm/communicator.h"

namespace summon::server {

// The communicator of a single-node cluster: one rank, no peers, no network.
// Gathers and scatters are host copies, broadcast and barrier do nothing, so
// the embedded single-node path runs the same code as a cluster.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }

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
  void Abort() override { aborted_ = true; }

 private:
  absl::Status CheckNotAborted() const;

  std::atomic<bool> aborted_{false};
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_LOCAL_COMMUNICATOR_H_
