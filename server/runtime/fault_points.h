#ifndef SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_
#define SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_

#include "absl/strings/string_view.h"

namespace summon::server {

// Crash injection for the fault harness (tests/faults, tests/coordinator):
// when the environment variable SUMMON_FAULT_POINT names `point`, the daemon
// kills itself there with SIGKILL, exactly as a machine failure would stop
// it. Points:
//   gather.before_exchange   a node's gather, before its collective
//   prepare.after_stage      a node staged its writeback data (PREPARE done)
//   commit.before_apply      a node received COMMIT, nothing applied yet
//   commit.after_apply       a node applied COMMIT, before answering
//   commit.decided           the leader recorded a COMMIT decision, before
//                            sending it to any node
//   publish.node_take        a node asked by the leader's Publish to take
//                            its version, before it does
// Armed at run time, on one node: with SUMMON_FAULT_FILE=PATH the daemon
// reads PATH at every point; a file holding "POINT kill" or "POINT stop"
// fires once at POINT: the file is removed, then the daemon raises SIGKILL
// or SIGSTOP (a pause, e.g. past its coordinator lease, until SIGCONT).
// The removal tells the test the point was reached. The fault scenarios
// (tests/coordinator/fault_scenarios_test) need both: which node leads is
// only known once the cluster runs, and a pause must hit a chosen point.
// Unset (the normal case) costs two getenv at first use.
void FaultPoint(absl::string_view point);

// Fence breaking for the history checker's own test (issue 31: "break the
// fencing once and see the checker fail"): true when the environment
// variable SUMMON_BROKEN_FENCE names `fence`, and the caller then skips that
// check. Fences:
//   model.lease   the leader's lease check before it applies a model
//                 operation (SummonServiceImpl::ActingEpoch)
// Never set outside tests/coordinator; a daemon with it set logs so at its
// first check.
bool FenceBroken(absl::string_view fence);

}  // namespace summon::server

#endif  // SUMMON_SERVER_RUNTIME_FAULT_POINTS_H_
