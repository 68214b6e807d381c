#ifndef SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_
#define SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_

// SessionManager's private records, shared by its two source files
// (session_manager.cc: lifecycle; session_tensors.cc: tensor access).

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/session/session_manager.h"

namespace summon::server {

// One gather of a scope: its copies live in the nodes' runtimes under
// `id`. Read-only sessions of the same identity share one.
struct SessionManager::Gather {
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

struct SessionManager::Session {
  std::string id;
  std::string owner;
  std::shared_ptr<ModelEntry> model;
  SessionOptions options;
  core::Scope scope;
  core::SessionState state = core::SessionState::kOpening;
  std::shared_ptr<Gather> gather;
  absl::Time created;
  absl::Time lease_deadline;
  // Guarded by the manager's mutex: tensors (index, grad) this session has
  // its own copy of, and their bytes on each node.
  std::set<std::pair<int, bool>> private_tensors;
  std::vector<int64_t> private_bytes_per_node;

  bool writable() const { return options.writeback; }
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_SESSION_INTERNAL_H_
