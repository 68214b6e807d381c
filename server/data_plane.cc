#include "server/data_plane.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::server {
namespace {

// Transfers whose rank has gradient shards: the others keep no gradients.
std::vector<core::Transfer> WithGrads(const ModelEntry& model,
                                      const std::vector<core::Transfer>& all) {
  std::vector<core::Transfer> kept;
  for (const core::Transfer& transfer : all) {
    if (model.store->HasGrads(transfer.rank)) kept.push_back(transfer);
  }
  return kept;
}

absl::Status CheckSingleLocalCopy(const ModelEntry& model,
                                  const core::GatherPlan& plan) {
  for (const core::SessionCopy& copy : plan.copies) {
    if (copy.node != 0 || model.spec.groups.topology.nodes != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "the local data plane moves bytes within one node; model '",
          model.name, "' spans ", model.spec.groups.topology.nodes, " nodes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LocalDataPlane::Gather(ModelEntry& model,
                                    const core::GatherPlan& plan,
                                    CopyBuffers& copy) {
  if (absl::Status status = CheckSingleLocalCopy(model, plan); !status.ok()) {
    return status;
  }
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  core::ExecuteGather(
      plan.transfers,
      [&](int rank, int unit) { return model.store->ParamShard(rank, unit); },
      [&](int) { return copy.params.data(); });
  if (!copy.grads.empty()) {
    core::ExecuteGather(
        WithGrads(model, plan.transfers),
        [&](int rank, int unit) { return model.store->GradShard(rank, unit); },
        [&](int) { return copy.grads.data(); });
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalDataPlane::Writeback(
    ModelEntry& model, const core::WritebackPlan& plan,
    const CopyBuffers& copy) {
  const uint8_t* params = copy.params.data();
  const uint8_t* grads = copy.grads.data();
  int64_t bytes = 0;
  absl::MutexLock shards_lock(&model.shards_mu);
  core::ExecuteWriteback(
      plan.transfers,
      [&](int rank, int unit) { return model.store->ParamShard(rank, unit); },
      [&](int) { return params; });
  for (const core::Transfer& transfer : plan.transfers) bytes += transfer.bytes;
  if (!copy.grads.empty()) {
    const std::vector<core::Transfer> grad_transfers =
        WithGrads(model, plan.transfers);
    core::ExecuteWriteback(
        grad_transfers,
        [&](int rank, int unit) { return model.store->GradShard(rank, unit); },
        [&](int) { return grads; });
    for (const core::Transfer& transfer : grad_transfers) {
      bytes += transfer.bytes;
    }
  }
  return bytes;
}

}  // namespace summon::server
