#include "server/comm/member_communicator.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::server {

MemberCommunicator::MemberCommunicator(std::unique_ptr<Communicator> inner,
                                       int node, int nodes,
                                       std::vector<int> members)
    : inner_(std::move(inner)),
      node_(node),
      nodes_(nodes),
      members_(std::move(members)),
      inner_rank_(nodes, -1) {
  for (size_t i = 0; i < members_.size(); ++i) {
    inner_rank_[members_[i]] = static_cast<int>(i);
  }
}

absl::StatusOr<std::vector<int64_t>> MemberCommunicator::Members(
    const std::vector<int64_t>& per_node) const {
  if (static_cast<int>(per_node.size()) != nodes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected one entry per node (", nodes_, "), got ", per_node.size()));
  }
  std::vector<int64_t> members;
  for (int node = 0; node < nodes_; ++node) {
    if (inner_rank_[node] >= 0) {
      members.push_back(per_node[node]);
    } else if (per_node[node] != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node,
                       " is not in the cluster but the "
                       "operation moves ",
                       per_node[node], " bytes of it"));
    }
  }
  return members;
}

absl::StatusOr<int> MemberCommunicator::InnerRoot(int root) const {
  if (root < 0 || root >= nodes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is outside the ", nodes_, " nodes"));
  }
  if (inner_rank_[root] < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", root, " is not in the cluster"));
  }
  return inner_rank_[root];
}

absl::Status MemberCommunicator::AllGatherV(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options) {
  // Absent nodes contribute nothing, so the members' bytes concatenated in
  // member order are the nodes' concatenated in node order.
  absl::StatusOr<std::vector<int64_t>> members = Members(recv_bytes_per_rank);
  if (!members.ok()) return members.status();
  return inner_->AllGatherV(send, send_bytes, recv, *members, options);
}

absl::Status MemberCommunicator::AllGatherAt(
    void* buffer, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& bytes, int part,
    const CollectiveOptions& options) {
  absl::StatusOr<std::vector<int64_t>> member_bytes = Members(bytes);
  if (!member_bytes.ok()) return member_bytes.status();
  if (static_cast<int>(offsets.size()) != nodes_) {
    return absl::InvalidArgumentError("expected one offset per node");
  }
  std::vector<int64_t> member_offsets;
  for (int node : members_) member_offsets.push_back(offsets[node]);
  return inner_->AllGatherAt(buffer, member_offsets, *member_bytes, part,
                             options);
}

absl::Status MemberCommunicator::AllGatherAtParts(
    void* buffer, const std::vector<GatherPart>& parts,
    const std::function<absl::Status(int part)>& ready,
    const CollectiveOptions& options) {
  std::vector<GatherPart> member_parts(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    absl::StatusOr<std::vector<int64_t>> bytes = Members(parts[k].bytes);
    if (!bytes.ok()) return bytes.status();
    if (static_cast<int>(parts[k].offsets.size()) != nodes_) {
      return absl::InvalidArgumentError("expected one offset per node");
    }
    member_parts[k].bytes = *std::move(bytes);
    for (int node : members_) {
      member_parts[k].offsets.push_back(parts[k].offsets[node]);
    }
  }
  return inner_->AllGatherAtParts(buffer, member_parts, ready, options);
}

absl::Status MemberCommunicator::Gather(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<std::vector<int64_t>> members = Members(recv_bytes_per_rank);
  if (!members.ok()) return members.status();
  absl::StatusOr<int> inner_root = InnerRoot(root);
  if (!inner_root.ok()) return inner_root.status();
  return inner_->Gather(send, send_bytes, recv, *members, *inner_root, options);
}

absl::Status MemberCommunicator::Scatter(
    const void* send, const std::vector<int64_t>& send_bytes_per_rank,
    void* recv, int64_t recv_bytes, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<std::vector<int64_t>> members = Members(send_bytes_per_rank);
  if (!members.ok()) return members.status();
  absl::StatusOr<int> inner_root = InnerRoot(root);
  if (!inner_root.ok()) return inner_root.status();
  return inner_->Scatter(send, *members, recv, recv_bytes, *inner_root,
                         options);
}

absl::Status MemberCommunicator::Broadcast(void* buffer, int64_t bytes,
                                           int root,
                                           const CollectiveOptions& options) {
  absl::StatusOr<int> inner_root = InnerRoot(root);
  if (!inner_root.ok()) return inner_root.status();
  return inner_->Broadcast(buffer, bytes, *inner_root, options);
}

}  // namespace summon::server
