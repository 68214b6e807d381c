#ifndef SUMMON_SERVER_COMM_MEMBER_COMMUNICATOR_H_
#define SUMMON_SERVER_COMM_MEMBER_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "server/comm/communicator.h"

namespace summon::server {

// A cluster formed on its survivors (docs/architecture.md "Many nodes"):
// the inner communicator connects only the member nodes (its rank i is the
// i-th member), while every caller keeps addressing nodes by node rank over
// the whole --nodes list. This presents the inner one as rank = this node's
// rank, size = every node, and drops the absent nodes' entries on the way
// in: an absent node must contribute and receive no bytes and never be a
// root (FAILED_PRECONDITION naming it otherwise), which the plans over the
// survivors guarantee (core::NodeSets).
class MemberCommunicator final : public Communicator {
 public:
  // `members`: the member nodes, ascending, `node` among them; `nodes`:
  // the size of the whole list.
  MemberCommunicator(std::unique_ptr<Communicator> inner, int node, int nodes,
                     std::vector<int> members);

  int rank() const override { return node_; }
  int size() const override { return nodes_; }
  absl::Status AllGatherV(const void* send, int64_t send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes_per_rank,
                          const CollectiveOptions& options) override;
  absl::Status AllGatherAt(void* buffer, const std::vector<int64_t>& offsets,
                           const std::vector<int64_t>& bytes, int part,
                           const CollectiveOptions& options) override;
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
  absl::Status Barrier(const CollectiveOptions& options) override {
    return inner_->Barrier(options);
  }
  void Abort() override { inner_->Abort(); }

 private:
  // `per_node` (one entry per node) reduced to the members' entries;
  // FAILED_PRECONDITION when an absent node's entry is not zero.
  absl::StatusOr<std::vector<int64_t>> Members(
      const std::vector<int64_t>& per_node) const;
  // The inner rank of node `root`; FAILED_PRECONDITION when it is absent.
  absl::StatusOr<int> InnerRoot(int root) const;

  const std::unique_ptr<Communicator> inner_;
  const int node_;
  const int nodes_;
  const std::vector<int> members_;
  std::vector<int> inner_rank_;  // By node; -1 for an absent node.
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_COMM_MEMBER_COMMUNICATOR_H_
