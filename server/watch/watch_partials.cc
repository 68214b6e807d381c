#include "server/watch/watch_partials.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/scope.h"

namespace summon::server {
namespace {

// The nice value of the threads that read a watch's shards (Linux nice is
// per thread): about a tenth of a core's share against a trainer thread at
// 0 when both want the same core, all of an idle core otherwise.
constexpr int kWatchNice = 10;

void LowerThisThreadsPriority() {
  // Best effort: a failure leaves the thread at the daemon's priority.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)),
                    kWatchNice);
}

// The node's work is cut into chunks of at most this many bytes: enough of them
// to keep every core busy even where the node has fewer ranks than cores, few
// enough that each is a long vectorised run.
constexpr int64_t kChunk = int64_t{8} << 20;

// A range of one transfer: bytes [offset, offset + bytes) of a slice that
// one of this node's ranks holds of a watched tensor.
struct WatchChunk {
  const core::Transfer* transfer = nullptr;
  size_t slot = 0;
  core::DType dtype = core::DType::kFloat32;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// The chunks of this node's slices of the watched tensors, in plan order.
absl::StatusOr<std::vector<WatchChunk>> ChunkNodeSlices(
    const ModelEntry& model, const WatchPartialsRequest& request,
    const core::GatherPlan& plan, const core::SessionBufferLayout& buffer,
    const std::vector<int>& slot_of_tensor) {
  std::vector<WatchChunk> chunks;
  for (const core::Transfer& transfer : plan.transfers) {
    if (std::find(model.local_ranks.begin(), model.local_ranks.end(),
                  transfer.rank) == model.local_ranks.end()) {
      continue;
    }
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
    if (request.grad && !model.store->HasGrads(transfer.rank)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", transfer.rank, " of model '", model.name,
                       "' has no grads segment"));
    }
    const core::DType dtype = buffer.tensors[tensor].dtype;
    const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
    const int64_t most = kChunk / element * element;
    for (int64_t offset = 0; offset < transfer.bytes; offset += most) {
      chunks.push_back(WatchChunk{&transfer, static_cast<size_t>(slot), dtype,
                                  offset,
                                  std::min(most, transfer.bytes - offset)});
    }
  }
  return chunks;
}

// Adds one chunk into `partials`: host shards in place, device shards
// through the store (on their GPU).
absl::Status AccumulateChunk(ModelEntry& model,
                             const WatchPartialsRequest& request,
                             const WatchChunk& chunk,
                             std::vector<core::WatchPartial>& partials) {
  const core::Transfer& transfer = *chunk.transfer;
  const std::optional<core::HistogramRange>& range =
      chunk.slot < request.ranges.size() ? request.ranges[chunk.slot]
                                         : std::nullopt;
  const int64_t numel =
      chunk.bytes / static_cast<int64_t>(core::ElementSize(chunk.dtype));
  const uint8_t* shard =
      request.grad ? model.store->GradShard(transfer.rank, transfer.unit)
                   : model.store->ParamShard(transfer.rank, transfer.unit);
  if (shard == nullptr) {
    // Device placement: computed where the bytes are (CUDA kernels on the
    // shards' GPU; other device memory copies to the host in pieces).
    return model.store->AccumulateWatchShard(
        transfer.rank, transfer.unit, request.grad,
        transfer.shard_offset + chunk.offset, chunk.dtype, numel, range,
        &partials[chunk.slot]);
  }
  return core::AccumulateWatchPartial(
      chunk.dtype, shard + transfer.shard_offset + chunk.offset, numel, range,
      &partials[chunk.slot]);
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
      return absl::NotFoundError(absl::StrCat("model '", model.name,
                                              "' has no parameter '",
                                              request.params[i], "'"));
    }
    slot_of_tensor[static_cast<size_t>(tensor)] = static_cast<int>(i);
  }
  std::vector<core::WatchPartial> partials;
  for (size_t i = 0; i < request.params.size(); ++i) {
    const bool binned = i < request.ranges.size() &&
                        request.ranges[i].has_value() && request.bins > 0;
    partials.push_back(core::EmptyWatchPartial(request.bins, binned));
  }
  absl::ReaderMutexLock shards_lock(&model.shards_mu);
  absl::StatusOr<std::vector<WatchChunk>> chunks =
      ChunkNodeSlices(model, request, *plan, buffer, slot_of_tensor);
  if (!chunks.ok()) return chunks.status();
  // The chunks are independent partials: one task per core, task t taking
  // chunks t, t + T, ... (a fixed split, so the result does not depend on
  // timing), each over its own copy of the empty partials, combined in task
  // order afterwards. Shard bytes are read in place without a lock. Each
  // task is a thread of its own at a lower priority (kWatchNice): where the
  // node's cores are all busy, the trainer's threads go first and the watch
  // takes what is left (a record late past the next OPTIMIZER is skipped,
  // never the trainer slowed).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t tasks =
      std::max<size_t>(1, std::min<size_t>(chunks->size(), cores));
  std::vector<std::vector<core::WatchPartial>> task_partials(tasks, partials);
  std::vector<absl::Status> statuses(tasks);
  auto run_task = [&](size_t task) {
    LowerThisThreadsPriority();
    for (size_t c = task; c < chunks->size(); c += tasks) {
      statuses[task] =
          AccumulateChunk(model, request, (*chunks)[c], task_partials[task]);
      if (!statuses[task].ok()) return;
    }
  };
  std::vector<std::thread> threads;
  for (size_t task = 0; task < tasks; ++task) {
    threads.emplace_back(run_task, task);
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t task = 0; task < tasks; ++task) {
    if (!statuses[task].ok()) return statuses[task];
    for (size_t i = 0; i < partials.size(); ++i) {
      if (absl::Status combined =
              core::CombineWatchPartials(task_partials[task][i], &partials[i]);
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
