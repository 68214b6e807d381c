#include "server/watch/watch_partials.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/scope.h"

namespace summon::server {
namespace {

// Adds the slices rank `rank` holds (one of this node's) into `partials`.
absl::Status AccumulateRank(ModelEntry& model,
                            const WatchPartialsRequest& request,
                            const core::GatherPlan& plan,
                            const core::SessionBufferLayout& buffer,
                            const std::vector<int>& slot_of_tensor, int rank,
                            std::vector<core::WatchPartial>* partials) {
  for (const core::Transfer& transfer : plan.transfers) {
    if (transfer.rank != rank) continue;
    // The tensor this range of the buffer belongs to: the last one starting
    // at or before it (tensors lie back to back in buffer order).
    auto after = std::upper_bound(
        buffer.tensors.begin(), buffer.tensors.end(), transfer.buffer_offset,
        [](int64_t offset, const core::SessionTensor& tensor) {
          return offset < tensor.buffer_offset;
        });
    const size_t tensor =
        static_cast<size_t>(std::distance(buffer.tensors.begin(), after) - 1);
    const int slot = slot_of_tensor[tensor];
    if (slot < 0) continue;
    const core::DType dtype = buffer.tensors[tensor].dtype;
    const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
    const std::optional<core::HistogramRange>& range =
        request.ranges.size() > static_cast<size_t>(slot)
            ? request.ranges[static_cast<size_t>(slot)]
            : std::nullopt;
    core::WatchPartial& partial = (*partials)[static_cast<size_t>(slot)];
    if (request.grad && !model.store->HasGrads(transfer.rank)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", transfer.rank, " of model '", model.name,
          "' has no grads segment"));
    }
    const uint8_t* shard =
        request.grad ? model.store->GradShard(transfer.rank, transfer.unit)
                     : model.store->ParamShard(transfer.rank, transfer.unit);
    if (shard != nullptr) {
      if (absl::Status added = core::AccumulateWatchPartial(
              dtype, shard + transfer.shard_offset, transfer.bytes / element,
              range, &partial);
          !added.ok()) {
        return added;
      }
      continue;
    }
    // Device placement: computed where the bytes are (CUDA kernels on the
    // shards' GPU; other device memory copies to the host in pieces).
    if (absl::Status added = model.store->AccumulateWatchShard(
            transfer.rank, transfer.unit, request.grad, transfer.shard_offset,
            dtype, transfer.bytes / element, range, &partial);
        !added.ok()) {
      return added;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<core::WatchPartial>> ComputeNodeWatchPartials(
    ModelEntry& model, const WatchPartialsRequest& request) {
  if (model.store == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has no shards on this node"));
  }
  core::ScopeRequest scope_request;
  scope_request.params = request.params;
  absl::StatusOr<core::Scope> scope =
      core::ResolveScope(model.spec, scope_request);
  if (!scope.ok()) return scope.status();
  const core::SessionBufferLayout buffer =
      core::LayoutSessionBuffer(model.spec, *scope);
  // One copy: every element has exactly one source rank.
  absl::StatusOr<core::GatherPlan> plan = core::PlanGather(
      model.spec, buffer, core::Placement::kHomeRank, /*home_rank=*/0);
  if (!plan.ok()) return plan.status();

  // The scope orders parameters its own way; answer in the request's.
  std::vector<int> slot_of_tensor(buffer.tensors.size(), -1);
  for (size_t i = 0; i < request.params.size(); ++i) {
    const int tensor = buffer.Find(request.params[i]);
    if (tensor < 0) {
      return absl::NotFoundError(absl::StrCat(
          "model '", model.name, "' has no parameter '", request.params[i],
          "'"));
    }
    slot_of_tensor[static_cast<size_t>(tensor)] = static_cast<int>(i);
  }
  std::vector<core::WatchPartial> partials;
  for (size_t i = 0; i < request.params.size(); ++i) {
    const bool binned = i < request.ranges.size() &&
                        request.ranges[i].has_value() && request.bins > 0;
    partials.push_back(core::EmptyWatchPartial(request.bins, binned));
  }
  const std::vector<int>& local = model.local_ranks;
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  // The local ranks' slices are independent partials: one task per rank,
  // each over its own copy of the empty partials, combined in rank order
  // afterwards (so the result does not depend on which task ends first).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t tasks = std::min<size_t>(local.size(), cores);
  std::vector<std::vector<core::WatchPartial>> rank_partials(
      std::max<size_t>(tasks, 1), partials);
  std::vector<absl::Status> statuses(rank_partials.size());
  auto run_task = [&](size_t task) {
    for (size_t r = task; r < local.size(); r += rank_partials.size()) {
      statuses[task] = AccumulateRank(model, request, *plan, buffer,
                                      slot_of_tensor, local[r],
                                      &rank_partials[task]);
      if (!statuses[task].ok()) return;
    }
  };
  std::vector<std::thread> threads;
  for (size_t task = 1; task < rank_partials.size(); ++task) {
    threads.emplace_back(run_task, task);
  }
  run_task(0);
  for (std::thread& thread : threads) thread.join();
  for (size_t task = 0; task < rank_partials.size(); ++task) {
    if (!statuses[task].ok()) return statuses[task];
    for (size_t i = 0; i < partials.size(); ++i) {
      if (absl::Status combined =
              core::CombineWatchPartials(rank_partials[task][i], &partials[i]);
          !combined.ok()) {
        return combined;
      }
    }
  }
  return partials;
}

absl::StatusOr<std::vector<std::vector<core::WatchPartial>>>
LocalWatchNodes::Partials(const WatchPartialsRequest& request) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request.model);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<core::WatchPartial>> partials =
      ComputeNodeWatchPartials(**model, request);
  if (!partials.ok()) return partials.status();
  return std::vector<std::vector<core::WatchPartial>>{*std::move(partials)};
}

}  // namespace summon::server
