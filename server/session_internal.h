#ifndef SUMMON_SERVER_SESSION_INTERNAL_H_
#define SUMMON_SERVER_SESSION_INTERNAL_H_

// SessionManager's private records, shared by its two source files
// (session_manager.cc: lifecycle; session_tensors.cc: tensor access).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/data_plane.h"
#include "server/session_manager.h"

namespace summon::server {

// One gathered copy of a scope's tensors (params, and grads when any scoped
// rank has them). Read-only sessions of the same identity share one.
struct SessionManager::Gather {
  core::GatherIdentity identity;
  core::SessionBufferLayout layout;
  core::GatherPlan plan;
  CopyBuffers copy;  // This node's copy.
  bool has_grads = false;
  int64_t bytes = 0;
  int holders = 0;  // Guarded by the manager's mutex.
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
  int64_t private_bytes = 0;  // Guarded by the manager's mutex.

  // Guards the tensor bytes this session sees: reads share, writes exclude.
  absl::Mutex data_mu;
  // Copy-on-write tensors of sessions whose gather may be shared.
  std::map<int, std::vector<uint8_t>> private_params ABSL_GUARDED_BY(data_mu);
  std::map<int, std::vector<uint8_t>> private_grads ABSL_GUARDED_BY(data_mu);

  bool writable() const { return options.writeback; }
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_INTERNAL_H_
