// A new leader's unit generations (issue 31: "generations are the highest
// any node holds"). The leader's own record (ModelEntry::runtime) starts at
// its store's generations when the daemon loads the model and only the
// leader moves it afterwards, so a node that becomes leader holds the values
// of its load while every node's store holds the previous leader's moves.
// Left so, readers would see generations go back, and every PREPARE would be
// ABORTED by R7 (the node's unit is ahead of the leader's gather).

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/session/session_manager.h"
#include "spdlog/spdlog.h"

namespace summon::server {

absl::Status SessionManager::AdoptGenerations(
    const std::string& model_name,
    const std::vector<std::map<int, uint64_t>>& held_by_node) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(model_name);
  if (!found.ok()) return found.status();
  ModelEntry& model = **found;
  GenerationsOp op;
  bool nodes_differ = false;
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock runtime_lock(&model.runtime_mu);
    const int units = static_cast<int>(model.runtime.units.size());
    for (int unit = 0; unit < units; ++unit) {
      // Never below what this leader already handed out: a generation a
      // reader saw must not come back.
      uint64_t highest = model.runtime.units[unit].generation;
      for (const std::map<int, uint64_t>& held : held_by_node) {
        if (auto it = held.find(unit); it != held.end()) {
          highest = std::max(highest, it->second);
        }
      }
      for (const std::map<int, uint64_t>& held : held_by_node) {
        auto it = held.find(unit);
        if (it != held.end() && it->second != highest) nodes_differ = true;
      }
      if (highest != model.runtime.units[unit].generation) {
        spdlog::info("model {} unit {}: generation {} from the nodes (was {})",
                     model_name, unit, highest,
                     model.runtime.units[unit].generation);
      }
      model.runtime.units[unit].generation = highest;
      op.generations[unit] = highest;
    }
    if (!nodes_differ) return absl::OkStatus();
    // A node behind (it missed the old leader's last move) would refuse
    // every PREPARE of that unit by R7: every node takes the highest, in
    // the new leader's order like any generation move.
    op.model = model_name;
    Number(op);
  }
  return SendGenerations(op, "generations rebuilt by a new leader",
                         options_.step_generations_wait);
}

}  // namespace summon::server
