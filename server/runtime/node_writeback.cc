// NodeRuntime: this node's side of the two-phase writeback. PREPARE checks
// that the scoped units did not move since the gather (R7) and stages this
// node's ranks' owned slices (from its own copy, or scattered from the home
// copy under rank0_only) without changing a shard; COMMIT publishes what was
// staged and sets the target generations (R8, R18); ABORT drops it. The
// generation moves outside writebacks (an optimizer step, init external, a
// step cut short) reach every node here too (SetGenerations). The decision
// between them is the session manager's (session_writeback.cc).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/trainer_rules.h"
#include "server/runtime/fault_points.h"
#include "server/runtime/gather_copy.h"
#include "server/runtime/node_runtime.h"
#include "server/store/shard_store.h"

namespace summon::server {

absl::StatusOr<int64_t> NodeRuntime::Prepare(const PrepareOp& op) {
  absl::StatusOr<std::shared_ptr<GatherCopy>> found = FindCopy(op.gather_id);
  if (!found.ok()) return found.status();
  GatherCopy& copy = **found;
  ModelEntry& model = *copy.model;
  const core::ModelSpec& spec = model.spec;
  int64_t staged_bytes = 0;
  absl::Status status = InSequence(op.sequence, [&]() -> absl::Status {
    for (const auto& [unit, generation] : op.expected_generations) {
      const uint64_t now = model.store->Generation(unit);
      if (now != generation && !op.force) {
        return absl::AbortedError(absl::StrCat(
            "unit '", spec.units[unit].fqn, "' moved from generation ",
            generation, " to ", now, " on node ", node_,
            " since the gather; close with force to overwrite"));
      }
    }
    const core::WritebackPlan plan =
        core::PlanWriteback(spec, copy.layout, copy.plan, copy.absent);
    const int nodes = spec.groups.topology.nodes;
    const int grads_factor = copy.grads ? 2 : 1;
    // Each node's transfers, in plan order.
    std::vector<std::vector<core::Transfer>> by_node(nodes);
    for (const core::Transfer& t : plan.transfers) {
      by_node[spec.groups.topology.NodeOf(t.rank)].push_back(t);
    }
    std::vector<int64_t> sizes(nodes, 0);
    for (int n = 0; n < nodes; ++n) {
      for (const core::Transfer& t : by_node[n]) sizes[n] += t.bytes;
      sizes[n] *= grads_factor;
    }
    // The bytes this node stages: its own copy's, or scattered from the home
    // copy (rank0_only).
    std::vector<uint8_t> mine;
    absl::MutexLock copy_lock(&copy.mu);
    auto pack = [&](int n, uint8_t* out)
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.mu) -> absl::Status {
      const int64_t grads_at = sizes[n] / grads_factor;
      int64_t at = 0;
      for (const core::Transfer& t : by_node[n]) {
        absl::Status packed =
            copy.CopyOut(false, t.buffer_offset, out + at, t.bytes);
        if (packed.ok() && copy.grads) {
          packed =
              copy.CopyOut(true, t.buffer_offset, out + grads_at + at, t.bytes);
        }
        if (!packed.ok()) return packed;
        at += t.bytes;
      }
      return absl::OkStatus();
    };
    // With a copy here, slices are staged straight from it; otherwise
    // (rank0_only, home elsewhere) they are scattered from the home copy.
    const bool from_copy =
        copy.copy_index >= 0 && (!copy.rank0_only || nodes == 1);
    if (!from_copy) {
      mine.resize(sizes[node_]);
      std::vector<uint8_t> send;
      if (node_ == copy.home_node) {
        int64_t total = 0;
        for (int64_t size : sizes) total += size;
        send.resize(total);
        int64_t at = 0;
        for (int n = 0; n < nodes; ++n) {
          if (absl::Status packed = pack(n, send.data() + at); !packed.ok()) {
            return packed;
          }
          at += sizes[n];
        }
      }
      Communicator* communicator = communicator_.load();
      if (communicator == nullptr) {
        return absl::UnavailableError("the cluster is not connected yet");
      }
      if (absl::Status scattered = communicator->Scatter(
              send.data(), sizes, mine.data(), sizes[node_], copy.home_node,
              Collective(op.sequence));
          !scattered.ok()) {
        return scattered;
      }
    }
    // Stage parameters and gradients in shared memory: a node that dies
    // after this point finishes a decided commit when it is back. The
    // staging copy of each shard skips the ranges staged over it below (plan
    // order is by rank, unit and offset, so each list is sorted).
    std::map<std::pair<int, int>, ShardStore::ByteRanges> overwritten;
    for (const core::Transfer& t : by_node[node_]) {
      overwritten[{t.rank, t.unit}].emplace_back(t.shard_offset,
                                                 t.shard_offset + t.bytes);
    }
    const int64_t grads_at = sizes[node_] / grads_factor;
    // One slice of params or grads into the staging: device to device from
    // a copy in device memory, else from host bytes (the copy or `mine`).
    auto stage = [&](const core::Transfer& t, bool grads, int64_t mine_at)
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.mu) -> absl::Status {
      const ShardStore::ByteRanges& written = overwritten[{t.rank, t.unit}];
      const uint64_t target = op.target_generations.at(t.unit);
      if (from_copy && copy.on_device) {
        // From the copy on the rank's own GPU.
        return model.store->StageFrom(
            t.rank, t.unit, grads, op.session_id, target, written,
            t.shard_offset,
            copy.DeviceCopyOn(model.store->DeviceOf(t.rank), grads),
            t.buffer_offset, t.bytes);
      }
      const uint8_t* from = from_copy ? copy.HostBytes(grads) + t.buffer_offset
                                      : mine.data() + mine_at;
      return model.store->StageBytes(t.rank, t.unit, grads, op.session_id,
                                     target, written, t.shard_offset, from,
                                     t.bytes);
    };
    int64_t at = 0;
    for (const core::Transfer& t : by_node[node_]) {
      if (absl::Status staged = stage(t, /*grads=*/false, at); !staged.ok()) {
        return staged;
      }
      if (copy.grads && model.store->HasGrads(t.rank)) {
        if (absl::Status staged = stage(t, /*grads=*/true, grads_at + at);
            !staged.ok()) {
          return staged;
        }
        staged_bytes += t.bytes;
      }
      staged_bytes += t.bytes;
      at += t.bytes;
    }
    FaultPoint("prepare.after_stage");
    return absl::OkStatus();
  });
  if (!status.ok()) {
    Abort(op.session_id);
    return status;
  }
  return staged_bytes;
}

absl::Status NodeRuntime::Commit(const CommitOp& op) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found = registry_->Get(op.model);
  if (!found.ok()) return found.status();
  ModelEntry& model = **found;
  // In sequence, so that every node applies a commit at the same point
  // relative to other sessions' gathers. Sequence 0: a commit decided before
  // a failure, finished while the cluster re-forms (nothing else runs then).
  auto in_order = [&](const std::function<absl::Status()>& body) {
    return op.sequence == 0 ? body() : InSequence(op.sequence, body);
  };
  return in_order([&]() -> absl::Status {
    absl::MutexLock shards_lock(&model.shards_mu);
    FaultPoint("commit.before_apply");
    ModelRegistry::ShardsWrite written;
    for (const auto& [unit, generation] : op.target_generations) {
      written.units.push_back(unit);
    }
    registry_->BeforeShardsWrite(model, written);
    absl::Status status = model.store->CommitStaging(op.session_id);
    // A node whose ranks own nothing of the scope staged nothing.
    if (!status.ok() && !absl::IsNotFound(status)) return status;
    // Units this node staged nothing for still take the writeback's
    // generation and, once, its external write (R18); a COMMIT re-run after
    // a crash finds the generation already set and counts nothing again,
    // and one re-issued for a node that was away (the others moved on
    // since: later writebacks, optimizer steps) never moves one back.
    for (const auto& [unit, generation] : op.target_generations) {
      if (model.store->Generation(unit) >= generation) continue;
      model.store->SetGeneration(unit, generation);
      if (core::IsExternalWrite(core::ShardWriter::kWriteback)) {
        model.store->NoteExternalWrite(unit);
      }
    }
    FaultPoint("commit.after_apply");
    return absl::OkStatus();
  });
}

absl::Status NodeRuntime::SetGenerations(const GenerationsOp& op) {
  // The sequence number is taken on every node even when the model is gone
  // here, so that later operations are not left waiting for it.
  return InSequence(op.sequence, [&]() -> absl::Status {
    absl::StatusOr<std::shared_ptr<ModelEntry>> found =
        registry_->Get(op.model);
    if (!found.ok()) return found.status();
    ModelEntry& model = **found;
    if (model.store == nullptr) return absl::OkStatus();  // MISSING_SHARDS.
    // A moved generation announces a write (an optimizer step, an init):
    // published versions keep their units first, so that a unit whose
    // generation moved is never read live (version_store.h).
    {
      absl::ReaderMutexLock shards_lock(&model.shards_mu);
      ModelRegistry::ShardsWrite moved;
      for (const auto& [unit, generation] : op.generations) {
        moved.units.push_back(unit);
      }
      registry_->BeforeShardsWrite(model, moved);
      for (const auto& [unit, generation] : op.generations) {
        model.store->SetGeneration(unit, generation);
      }
    }
    return op.initialized ? registry_->EndInit(model) : absl::OkStatus();
  });
}

void NodeRuntime::Abort(const std::string& session_id) {
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    if (model->store == nullptr) continue;  // MISSING_SHARDS.
    for (int rank : model->local_ranks) {
      std::optional<ShardStore::StagedWriteback> staged =
          model->store->Staged(rank);
      if (staged.has_value() &&
          (session_id.empty() || staged->session_id == session_id)) {
        model->store->ClearStaging(rank).IgnoreError();
      }
    }
  }
}

}  // namespace summon::server
