// SessionManager: a node that came back catches up before anything is
// served (docs/architecture.md "Many nodes"). While it was away the cluster
// served on its survivors, so writebacks and optimizer steps may have moved
// the shards of replicated models (NO_SHARD, the hybrid strategies) on the
// other replicas only. On the leader, before the epoch is READY, each
// model whose every shard has a holder besides the returning nodes is
// gathered from those holders and written back into the returning nodes'
// ranks only, with the generations the leader holds: bytes and generations
// alike, so nothing written while the node was away is lost and it never
// serves stale bytes. A model some of whose shards only a returning node
// holds (FULL_SHARD) could not be written while it was away: it has
// nothing to catch up.

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/plan.h"
#include "core/scope.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {

absl::Status SessionManager::CatchUpReturningNodes() {
  const std::set<int> returning = ops_->ReturningNodes();
  if (returning.empty()) return absl::OkStatus();
  core::NodeSets nodes;
  nodes.absent = ops_->AbsentNodes();
  nodes.stale = returning;
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    const core::ModelSpec& spec = model->spec;
    absl::StatusOr<core::Scope> scope =
        core::ResolveScope(spec, core::ScopeRequest{});
    if (!scope.ok()) return scope.status();
    const core::SessionBufferLayout layout =
        core::LayoutSessionBuffer(spec, *scope);
    if (layout.total_bytes == 0) continue;
    // Only the survivors hold some shard: nobody could write it meanwhile.
    if (!core::PlanGather(spec, layout, core::Placement::kPerNode, 0, nodes)
             .ok()) {
      continue;
    }
    const std::string id =
        absl::StrCat("catch-up-", model->name, "-", ops_->Epoch());
    GatherOp gather;
    gather.gather_id = id;
    gather.model = model->name;
    gather.offload_to_cpu = true;
    gather.stale_nodes.assign(returning.begin(), returning.end());
    PrepareOp prepare;
    prepare.gather_id = id;
    prepare.session_id = id;
    prepare.force = true;
    {
      absl::MutexLock runtime_lock(&model->runtime_mu);
      for (int unit : scope->units) {
        prepare.target_generations[unit] =
            model->runtime.units[unit].generation;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      Number(gather);
      Number(prepare);
    }
    absl::Status status = ops_->Gather(gather);
    if (status.ok()) status = ops_->Prepare(prepare).status();
    if (status.ok()) {
      CommitOp commit{0, model->name, id, id, prepare.target_generations};
      {
        absl::MutexLock lock(&mu_);
        Number(commit);
      }
      status = ops_->Commit(commit);
    }
    if (!status.ok()) ops_->Abort(id);
    ops_->Release(id);
    if (!status.ok()) {
      // The epoch does not become READY: the next formation (these nodes
      // still returning) tries again.
      return absl::UnavailableError(absl::StrCat(
          "node(s) ", absl::StrJoin(returning, ", "),
          " could not catch up model '", model->name, "': ", status.message()));
    }
    spdlog::info("cluster: node(s) {} caught up model {} ({} bytes)",
                 absl::StrJoin(returning, ", "), model->name,
                 layout.total_bytes);
  }
  return absl::OkStatus();
}

}  // namespace summon::server
