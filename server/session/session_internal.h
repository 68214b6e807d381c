#ifndef SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_
#define SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_

// SessionManager's private records, shared by its source files: a gather
// of a scope (GatherRecord) and a session (SessionRecord), plain structs
// beside the manager rather than nested in it, so this header does not
// include session_manager.h back.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/session_rules.h"
#include "core/session_state.h"
#include "server/model/model_registry.h"
#include "server/session/session_types.h"

namespace summon::server {

// One gather of a scope: its copies live in the nodes' runtimes under
// `id`. Read-only sessions of the same identity share one.
struct GatherRecord {
  std::string id;
  core::GatherIdentity identity;
  core::SessionBufferLayout layout;
  bool has_grads = false;
  // Copy bytes per node (params and grads), released with the gather.
  std::vector<int64_t> bytes_per_node;
  int64_t bytes = 0;   // Of one copy.
  uint64_t epoch = 0;  // The cluster epoch it was gathered in.
  int64_t network_bytes = 0;
  int holders = 0;  // Guarded by the manager's mutex.
  // Its device copies were handed out over CUDA IPC (MapSession), which
  // cannot be made read-only: later opens do not share it. Guarded by the
  // manager's mutex.
  bool mapped_on_device = false;
};

// A session as the manager holds it, from OPENING until it is finished.
struct SessionRecord {
  std::string id;
  std::string owner;
  std::shared_ptr<ModelEntry> model;
  SessionOptions options;
  core::Scope scope;
  core::SessionState state = core::SessionState::kOpening;
  std::shared_ptr<GatherRecord> gather;
  absl::Time created;
  absl::Time lease_deadline;
  // Guarded by the manager's mutex: tensors (index, grad) this session has
  // its own copy of, and their bytes on each node.
  std::set<std::pair<int, bool>> private_tensors;
  std::vector<int64_t> private_bytes_per_node;
  // R22, guarded by the manager's mutex: a WriteTensor reached this session,
  // or its device copies went out for writing (MapSession). A writable
  // session never written closes without a writeback.
  bool written = false;

  bool writable() const { return options.writeback; }
};

// A scope as the session log lines name it.
inline std::string ScopeText(const core::ScopeRequest& scope) {
  if (!scope.params.empty()) {
    return absl::StrCat("params(", scope.params.size(), ")");
  }
  return absl::StrCat("'", scope.module_fqn, "'",
                      scope.recurse ? "" : " no-recurse");
}

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_
