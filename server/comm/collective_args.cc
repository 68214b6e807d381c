#include "server/comm/collective_args.h"

#include <algorithm>
#include <cstring>
#include <utility>

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

absl::Status CheckAllGatherAt(const Communicator& comm, const void* buffer,
                              const std::vector<int64_t>& offsets,
                              const std::vector<int64_t>& bytes, int part,
                              const CollectiveOptions& options) {
  if (absl::Status checked = CheckOptions(options); !checked.ok()) {
    return checked;
  }
  if (part < 0 || part > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("part ", part, " is not in [0, 255]"));
  }
  if (static_cast<int64_t>(offsets.size()) != comm.size() ||
      static_cast<int64_t>(bytes.size()) != comm.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather at offsets has ", offsets.size(), " offsets and ",
        bytes.size(), " byte counts for a communicator of size ", comm.size()));
  }
  std::vector<std::pair<int64_t, int64_t>> slots;
  for (size_t r = 0; r < offsets.size(); ++r) {
    if (offsets[r] < 0 || bytes[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, "'s slot is at ", offsets[r], " for ",
                       bytes[r], " bytes"));
    }
    if (bytes[r] > 0) slots.emplace_back(offsets[r], bytes[r]);
  }
  std::sort(slots.begin(), slots.end());
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i - 1].first + slots[i - 1].second > slots[i].first) {
      return absl::InvalidArgumentError("all-gather slots overlap");
    }
  }
  return CheckBuffer("all-gather", buffer, slots.empty() ? 0 : 1);
}

absl::Status CheckAllGatherAtParts(
    const Communicator& comm, const void* buffer,
    const std::vector<Communicator::GatherPart>& parts,
    const CollectiveOptions& options) {
  if (parts.size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an all-gather at offsets has at most 256 parts, not ", parts.size()));
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    if (absl::Status checked =
            CheckAllGatherAt(comm, buffer, parts[k].offsets, parts[k].bytes,
                             static_cast<int>(k), options);
        !checked.ok()) {
      return absl::Status(checked.code(),
                          absl::StrCat("part ", k, ": ", checked.message()));
    }
  }
  return CheckOptions(options);
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

// The portable AllGatherAt: the slots packed in rank order, an in-place
// AllGatherV, the other ranks' slots unpacked. Parts share the tag: the
// backends that keep this default run one operation at a time per tag.
absl::Status Communicator::AllGatherAt(void* buffer,
                                       const std::vector<int64_t>& offsets,
                                       const std::vector<int64_t>& bytes,
                                       int part,
                                       const CollectiveOptions& options) {
  if (absl::Status checked =
          CheckAllGatherAt(*this, buffer, offsets, bytes, part, options);
      !checked.ok()) {
    return checked;
  }
  int64_t total = 0;
  std::vector<int64_t> packed_at(bytes.size());
  for (size_t r = 0; r < bytes.size(); ++r) {
    packed_at[r] = total;
    total += bytes[r];
  }
  std::vector<uint8_t> packed(static_cast<size_t>(total));
  uint8_t* const base = static_cast<uint8_t*>(buffer);
  const int me = rank();
  CopyHostBytes(packed.data() + packed_at[me], base + offsets[me], bytes[me]);
  absl::Status gathered = AllGatherV(packed.data() + packed_at[me], bytes[me],
                                     packed.data(), bytes, options);
  if (!gathered.ok()) return gathered;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (static_cast<int>(r) == me) continue;
    CopyHostBytes(base + offsets[r], packed.data() + packed_at[r], bytes[r]);
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllGatherAtParts(
    void* buffer, const std::vector<GatherPart>& parts,
    const std::function<absl::Status(int part)>& ready,
    const CollectiveOptions& options) {
  if (absl::Status checked =
          CheckAllGatherAtParts(*this, buffer, parts, options);
      !checked.ok()) {
    return checked;
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    const int part = static_cast<int>(k);
    if (absl::Status filled = ready(part); !filled.ok()) return filled;
    if (absl::Status gathered = AllGatherAt(buffer, parts[k].offsets,
                                            parts[k].bytes, part, options);
        !gathered.ok()) {
      return gathered;
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::server
