#ifndef SUMMON_SERVER_SESSION_SESSION_TYPES_H_
#define SUMMON_SERVER_SESSION_SESSION_TYPES_H_

// The plain records of sessions that the session manager's callers (the
// services, proto conversion, the daemon's metrics) pass around: a
// session's options and its description, the result of a close, of a phase
// report, the manager's usage and a copy shared with a same-host client.
// Data only, without the manager class (session_manager.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/plan.h"
#include "core/scope.h"
#include "core/session_rules.h"
#include "core/session_state.h"
#include "server/runtime/node_op_types.h"

namespace summon::server {

// A session's options (docs/design.md#session-options), with their
// defaults.
struct SessionOptions {
  core::ScopeRequest scope;
  bool writeback = true;
  bool rank0_only = false;
  int home_rank = 0;
  bool offload_to_cpu = false;
  bool with_grads = false;
  std::optional<core::DType> read_dtype;
  absl::Duration lease = absl::Seconds(60);
};

struct SessionInfo {
  std::string id;
  std::string model;
  std::string owner;
  SessionOptions options;
  core::SessionState state = core::SessionState::kOpening;
  std::map<std::string, uint64_t> gathered_generations;  // Unit FQN -> gen.
  std::vector<core::SessionTensor> params;
  bool has_grads = false;
  absl::Time created;
  absl::Time expires;
  int64_t bytes = 0;  // Of the (possibly shared) gather.
  bool shared_gather = false;
  int64_t network_bytes = 0;  // Sent between nodes by the gather.
  std::vector<std::string> warnings;
};

struct CloseResult {
  bool written_back = false;
  // Without a writeback, why: "aborted", "read-only session" or "nothing
  // written" (R22).
  std::string reason;
  int64_t bytes_written = 0;
  std::map<std::string, uint64_t> generations;  // Unit FQN -> new gen.
  // Unit FQN -> its external-write counter after the writeback (R18).
  std::map<std::string, uint64_t> external_writes;
};

struct PhaseReport {
  core::TrainingPhase previous = core::TrainingPhase::kIdle;
  core::TrainingPhase phase = core::TrainingPhase::kIdle;
  std::optional<int64_t> step;
  absl::Duration waited;
  // Set on the move that ended a step every rank asked to publish
  // (ReportPhase's publish_step): the version to publish now, under the
  // hold the move took. Or, when some rank asked but it cannot be
  // published (the ranks asked for different steps, a writable session
  // holds a unit), why not.
  std::optional<int64_t> publish;
  absl::Status publish_refused;
};

// For metrics (SessionManager::CurrentUsage): sessions held (any principal)
// and session copies' bytes reserved per node against the memory budget.
struct SessionUsage {
  int readonly_sessions = 0;
  int writable_sessions = 0;
  std::vector<int64_t> memory_per_node;
};

// A session's copy held on this node, for a client on its host
// (SessionManager::ShareCopy, MapSession), with its size and tensors.
struct SharedSessionCopy {
  LocalCopyShare share;  // share.fd is owned by the caller.
  int64_t bytes = 0;
  std::vector<core::SessionTensor> tensors;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_SESSION_SESSION_TYPES_H_
