#include "server/comm/collective_args.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace summon::server {
namespace {

absl::Status CheckOptions(const CollectiveOptions& options) {
  if (options.timeout <= absl::ZeroDuration() ||
      options.timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective timeout must be positive and finite, got ",
                     absl::FormatDuration(options.timeout)));
  }
  return absl::OkStatus();
}

absl::Status CheckRoot(const Communicator& comm, int root) {
  if (root < 0 || root >= comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not a rank of a communicator of size ",
                     comm.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(absl::string_view what, const void* buffer,
                         int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " byte count is negative: ", bytes));
  }
  if (buffer == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " buffer is null for ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// One count per rank, none negative, this rank's equal to `own_bytes`.
absl::StatusOr<RankSlices> SliceByRank(const Communicator& comm,
                                       absl::string_view what,
                                       const std::vector<int64_t>& per_rank,
                                       int64_t own_bytes) {
  if (static_cast<int64_t>(per_rank.size()) != comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", per_rank.size(),
                     " byte counts for a communicator of size ", comm.size()));
  }
  RankSlices slices;
  slices.bytes = per_rank;
  slices.offsets.reserve(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (per_rank[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " byte count of rank ", r, " is negative: ", per_rank[r]));
    }
    slices.offsets.push_back(slices.total_bytes);
    slices.total_bytes += per_rank[r];
  }
  if (per_rank[comm.rank()] != own_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " gives rank ", comm.rank(), " ", per_rank[comm.rank()],
        " bytes but this rank moves ", own_bytes));
  }
  return slices;
}

}  // namespace

absl::StatusOr<RankSlices> CheckAllGatherV(
    const Communicator& comm, const void* send, int64_t send_bytes,
    const void* recv, const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = CheckBuffer("send", send, send_bytes); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices =
      SliceByRank(comm, "recv_bytes_per_rank", recv_bytes_per_rank, send_bytes);
  if (!slices.ok()) return slices;
  if (absl::Status s = CheckBuffer("recv", recv, slices->total_bytes);
      !s.ok()) {
    return s;
  }
  return slices;
}

absl::StatusOr<RankSlices> CheckGather(
    const Communicator& comm, const void* send, int64_t send_bytes,
    const void* recv, const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = CheckRoot(comm, root); !s.ok()) return s;
  if (absl::Status s = CheckBuffer("send", send, send_bytes); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices =
      SliceByRank(comm, "recv_bytes_per_rank", recv_bytes_per_rank, send_bytes);
  if (!slices.ok()) return slices;
  if (comm.rank() == root) {
    if (absl::Status s = CheckBuffer("recv", recv, slices->total_bytes);
        !s.ok()) {
      return s;
    }
  }
  return slices;
}

absl::StatusOr<RankSlices> CheckScatter(
    const Communicator& comm, const void* send,
    const std::vector<int64_t>& send_bytes_per_rank, const void* recv,
    int64_t recv_bytes, int root, const CollectiveOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = CheckRoot(comm, root); !s.ok()) return s;
  if (absl::Status s = CheckBuffer("recv", recv, recv_bytes); !s.ok()) return s;
  absl::StatusOr<RankSlices> slices =
      SliceByRank(comm, "send_bytes_per_rank", send_bytes_per_rank, recv_bytes);
  if (!slices.ok()) return slices;
  if (comm.rank() == root) {
    if (absl::Status s = CheckBuffer("send", send, slices->total_bytes);
        !s.ok()) {
      return s;
    }
  }
  return slices;
}

absl::Status CheckBroadcast(const Communicator& comm, const void* buffer,
                            int64_t bytes, int root,
                            const CollectiveOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = CheckRoot(comm, root); !s.ok()) return s;
  return CheckBuffer("broadcast", buffer, bytes);
}

absl::Status CheckBarrier(const CollectiveOptions& options) {
  return CheckOptions(options);
}

void CopyHostBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes == 0 || dst == src) return;
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

}  // namespace summon::server
