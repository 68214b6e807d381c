#ifndef SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_
#define SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_

#include "absl/strings/string_view.h"

namespace summon::server {

// Crash injection for the fault harness (tests/faults): when the environment
// variable SUMMON_FAULT_POINT names `point`, the daemon kills itself there
// with SIGKILL, exactly as a machine failure would stop it. Points:
//   gather.before_exchange   a node's gather, before its collective
//   prepare.after_stage      a node staged its writeback data (PREPARE done)
//   commit.before_apply      a node received COMMIT, nothing applied yet
//   commit.after_apply       a node applied COMMIT, before answering
//   commit.decided           the leader recorded a COMMIT decision, before
//                            sending it to any node
// Unset (the normal case) costs one getenv at first use.
void FaultPoint(absl::string_view point);

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_
