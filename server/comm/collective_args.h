#ifndef SUMMON_SERVER_COMM_COLLECTIVE_ARGS_H_
#define SUMMON_SERVER_COMM_COLLECTIVE_ARGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"

namespace summon::server {

// Argument checks shared by every Communicator backend, so that each one
// answers the same mistake with the same INVALID_ARGUMENT before anything is
// sent (a rank failing alone would leave its peers to time out).

// Where each rank's bytes sit in a buffer that concatenates them in rank
// order.
struct RankSlices {
  std::vector<int64_t> bytes;
  std::vector<int64_t> offsets;
  int64_t total_bytes = 0;
};

absl::StatusOr<RankSlices> CheckAllGatherV(
    const Communicator& comm, const void* send, int64_t send_bytes,
    const void* recv, const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options);

// `recv` is checked on the root only.
absl::StatusOr<RankSlices> CheckGather(
    const Communicator& comm, const void* send, int64_t send_bytes,
    const void* recv, const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options);

// `send` is checked on the root only.
absl::StatusOr<RankSlices> CheckScatter(
    const Communicator& comm, const void* send,
    const std::vector<int64_t>& send_bytes_per_rank, const void* recv,
    int64_t recv_bytes, int root, const CollectiveOptions& options);

// Every slot inside no other, sizes and offsets non-negative, one per rank,
// a part in [0, 255].
absl::Status CheckAllGatherAt(const Communicator& comm, const void* buffer,
                              const std::vector<int64_t>& offsets,
                              const std::vector<int64_t>& bytes, int part,
                              const CollectiveOptions& options);

// At most 256 parts, each as CheckAllGatherAt (the message names the part).
absl::Status CheckAllGatherAtParts(
    const Communicator& comm, const void* buffer,
    const std::vector<Communicator::GatherPart>& parts,
    const CollectiveOptions& options);

absl::Status CheckBroadcast(const Communicator& comm, const void* buffer,
                            int64_t bytes, int root,
                            const CollectiveOptions& options);

absl::Status CheckBarrier(const CollectiveOptions& options);

// Host memcpy that skips the copy when source and destination are the same
// bytes (an in-place collective).
void CopyHostBytes(void* dst, const void* src, int64_t bytes);

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_COLLECTIVE_ARGS_H_
