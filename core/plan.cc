#include "core/plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

constexpr int64_t kTensorAlignment = 64;

// The nearest holder of shard position `position` for a copy: the copy's own
// rank, else the lowest rank on the copy's node, else the lowest rank; never
// one on an absent or stale node. -1 when no rank may be a source.
int SourceRank(const ShardGroups& groups, int position, const SessionCopy& copy,
               const NodeSets& nodes) {
  const int world = groups.topology.world_size();
  int best = -1;
  int best_score = 3;
  for (int rank = 0; rank < world; ++rank) {
    if (groups.PositionOf(rank) != position) continue;
    const int node = groups.topology.NodeOf(rank);
    if (nodes.absent.count(node) > 0 || nodes.stale.count(node) > 0) continue;
    int score = 2;
    if (rank == copy.rank) {
      score = 0;
    } else if (groups.topology.NodeOf(rank) == copy.node) {
      score = 1;
    }
    if (score < best_score) {
      best = rank;
      best_score = score;
    }
  }
  return best;
}

// The lowest rank holding shard position `position`.
int FirstHolder(const ShardGroups& groups, int position) {
  for (int rank = 0; rank < groups.topology.world_size(); ++rank) {
    if (groups.PositionOf(rank) == position) return rank;
  }
  return 0;
}

// The copy a rank takes its writeback slice from: its own, its node's, or the
// first one (the home copy under rank0_only).
int SourceCopy(const std::vector<SessionCopy>& copies, int rank, int node) {
  int by_node = -1;
  for (size_t c = 0; c < copies.size(); ++c) {
    if (copies[c].rank == rank) return static_cast<int>(c);
    if (by_node < 0 && copies[c].node == node) by_node = static_cast<int>(c);
  }
  return by_node >= 0 ? by_node : 0;
}

}  // namespace

int SessionBufferLayout::Find(absl::string_view fqn) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].fqn == fqn) return static_cast<int>(i);
  }
  return -1;
}

SessionBufferLayout LayoutSessionBuffer(const ModelSpec& model,
                                        const Scope& scope) {
  SessionBufferLayout buffer;
  int64_t offset = 0;
  for (const ScopedParam& scoped : scope.params) {
    const FlatParamEntry& param = model.Param(scoped.location);
    offset =
        (offset + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    SessionTensor tensor{param.fqn,   scoped.location, param.shape,
                         param.dtype, param.numel,     offset};
    offset += tensor.bytes();
    buffer.tensors.push_back(std::move(tensor));
  }
  buffer.total_bytes = offset;
  return buffer;
}

absl::StatusOr<GatherPlan> PlanGather(const ModelSpec& model,
                                      const SessionBufferLayout& buffer,
                                      Placement placement, int home_rank,
                                      const NodeSets& nodes) {
  const ShardGroups& groups = model.groups;
  const Topology& topology = groups.topology;
  GatherPlan plan;
  switch (placement) {
    case Placement::kEveryRank:
      for (int rank = 0; rank < topology.world_size(); ++rank) {
        if (nodes.absent.count(topology.NodeOf(rank)) > 0) continue;
        plan.copies.push_back({topology.NodeOf(rank), rank});
      }
      break;
    case Placement::kPerNode:
      for (int node = 0; node < topology.nodes; ++node) {
        if (nodes.absent.count(node) > 0) continue;
        plan.copies.push_back({node, -1});
      }
      break;
    case Placement::kHomeRank:
      if (home_rank < 0 || home_rank >= topology.world_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("home rank ", home_rank, " is outside the world of ",
                         topology.world_size(), " ranks"));
      }
      if (nodes.absent.count(topology.NodeOf(home_rank)) > 0) {
        return absl::UnavailableError(
            absl::StrCat("the home rank ", home_rank, " is on node ",
                         topology.NodeOf(home_rank),
                         ", which is not in the cluster"));
      }
      plan.copies.push_back({topology.NodeOf(home_rank), home_rank});
      break;
  }
  for (size_t c = 0; c < plan.copies.size(); ++c) {
    for (const SessionTensor& tensor : buffer.tensors) {
      const FlatParamLayout& layout = model.units[tensor.location.unit].layout;
      const int64_t element_size =
          static_cast<int64_t>(ElementSize(tensor.dtype));
      for (int position = 0; position < groups.group_size; ++position) {
        const ShardSlice slice =
            layout.SliceOf(tensor.location.param, position);
        if (!slice.in_shard) continue;
        const int source =
            SourceRank(groups, position, plan.copies[c], nodes);
        if (source < 0) {
          // Every holder of this chunk is away: name the first one.
          const int rank = FirstHolder(groups, position);
          const int node = topology.NodeOf(rank);
          return absl::UnavailableError(absl::StrCat(
              "it needs rank ", rank, " on node ", node,
              nodes.absent.count(node) > 0
                  ? ", which is not in the cluster"
                  : ", which is catching up",
              " (no node in the cluster holds a replica of its shard)"));
        }
        // One transfer per run: an FSDP2 chunk on a dim > 0 is strided in
        // the full tensor, everything else is one run.
        ForEachRun(slice, [&](int64_t intra, int64_t in_shard, int64_t numel) {
          plan.transfers.push_back(Transfer{
              source,
              tensor.location.unit,
              in_shard * element_size,
              static_cast<int>(c),
              tensor.buffer_offset + intra * element_size,
              numel * element_size,
          });
        });
      }
    }
  }
  return plan;
}

WritebackPlan PlanWriteback(const ModelSpec& model,
                            const SessionBufferLayout& buffer,
                            const GatherPlan& gather,
                            const std::set<int>& absent) {
  const ShardGroups& groups = model.groups;
  WritebackPlan plan;
  for (int rank = 0; rank < groups.topology.world_size(); ++rank) {
    if (absent.count(groups.topology.NodeOf(rank)) > 0) continue;
    const int position = groups.PositionOf(rank);
    const int copy =
        SourceCopy(gather.copies, rank, groups.topology.NodeOf(rank));
    for (const SessionTensor& tensor : buffer.tensors) {
      const FlatParamLayout& layout = model.units[tensor.location.unit].layout;
      const ShardSlice slice = layout.SliceOf(tensor.location.param, position);
      if (!slice.in_shard) continue;
      const int64_t element_size =
          static_cast<int64_t>(ElementSize(tensor.dtype));
      ForEachRun(slice, [&](int64_t intra, int64_t in_shard, int64_t numel) {
        plan.transfers.push_back(Transfer{
            rank,
            tensor.location.unit,
            in_shard * element_size,
            copy,
            tensor.buffer_offset + intra * element_size,
            numel * element_size,
        });
      });
    }
  }
  std::sort(plan.transfers.begin(), plan.transfers.end(),
            [](const Transfer& a, const Transfer& b) {
              return std::tie(a.rank, a.unit, a.shard_offset) <
                     std::tie(b.rank, b.unit, b.shard_offset);
            });
  return plan;
}

std::vector<std::vector<ShardRange>> RangesSentByNode(const ModelSpec& model,
                                                      const GatherPlan& plan) {
  std::vector<std::set<ShardRange>> sets(model.groups.topology.nodes);
  for (const Transfer& transfer : plan.transfers) {
    const int source = model.groups.topology.NodeOf(transfer.rank);
    if (source == plan.copies[transfer.copy].node) continue;
    sets[source].insert(ShardRange{transfer.rank, transfer.unit,
                                   transfer.shard_offset, transfer.bytes});
  }
  std::vector<std::vector<ShardRange>> ranges;
  for (const auto& set : sets) ranges.emplace_back(set.begin(), set.end());
  return ranges;
}

int64_t RangesBytes(const std::vector<ShardRange>& ranges) {
  int64_t bytes = 0;
  for (const ShardRange& range : ranges) bytes += std::get<3>(range);
  return bytes;
}

bool ExchangeLandsInCopy(const ModelSpec& model, const GatherPlan& plan,
                         int copy) {
  std::map<ShardRange, int64_t> offset_in_copy;
  for (const Transfer& transfer : plan.transfers) {
    if (transfer.copy != copy) continue;
    offset_in_copy[ShardRange{transfer.rank, transfer.unit,
                              transfer.shard_offset, transfer.bytes}] =
        transfer.buffer_offset;
  }
  // Every range another node sends reaches this copy through RangesSentByNode,
  // so checking that each sent range sits at its exchange offset suffices.
  int64_t at = 0;
  for (const std::vector<ShardRange>& ranges : RangesSentByNode(model, plan)) {
    for (const ShardRange& range : ranges) {
      auto it = offset_in_copy.find(range);
      if (it == offset_in_copy.end() || it->second != at) return false;
      at += std::get<3>(range);
    }
  }
  return true;
}

int64_t GatherNetworkBytes(const ModelSpec& model, const GatherPlan& plan) {
  std::set<int> copy_nodes;
  for (const SessionCopy& copy : plan.copies) copy_nodes.insert(copy.node);
  const std::vector<std::vector<ShardRange>> sent =
      RangesSentByNode(model, plan);
  int64_t total = 0;
  for (size_t node = 0; node < sent.size(); ++node) {
    const int64_t receivers =
        static_cast<int64_t>(copy_nodes.size()) -
        (copy_nodes.count(static_cast<int>(node)) ? 1 : 0);
    total += RangesBytes(sent[node]) * receivers;
  }
  return total;
}

std::vector<int64_t> CopyBytesPerNode(const ModelSpec& model,
                                      const SessionBufferLayout& buffer,
                                      const GatherPlan& gather) {
  std::vector<int64_t> bytes(model.groups.topology.nodes, 0);
  for (const SessionCopy& copy : gather.copies) {
    bytes[copy.node] += buffer.total_bytes;
  }
  return bytes;
}

int64_t CrossNodeBytes(const ModelSpec& model,
                       const std::vector<SessionCopy>& copies,
                       const std::vector<Transfer>& transfers) {
  int64_t total = 0;
  for (const Transfer& transfer : transfers) {
    if (model.groups.topology.NodeOf(transfer.rank) !=
        copies[transfer.copy].node) {
      total += transfer.bytes;
    }
  }
  return total;
}

void ExecuteGather(const std::vector<Transfer>& transfers,
                   const ShardAddress& shard, const CopyAddress& copy) {
  for (const Transfer& transfer : transfers) {
    std::memcpy(copy(transfer.copy) + transfer.buffer_offset,
                shard(transfer.rank, transfer.unit) + transfer.shard_offset,
                static_cast<size_t>(transfer.bytes));
  }
}

void ExecuteWriteback(const std::vector<Transfer>& transfers,
                      const ShardAddress& shard, const ConstCopyAddress& copy) {
  for (const Transfer& transfer : transfers) {
    std::memcpy(shard(transfer.rank, transfer.unit) + transfer.shard_offset,
                copy(transfer.copy) + transfer.buffer_offset,
                static_cast<size_t>(transfer.bytes));
  }
}

}  // namespace summon::core
