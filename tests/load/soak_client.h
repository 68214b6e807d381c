#ifndef SUMMON_TESTS_LOAD_SOAK_CLIENT_H_
#define SUMMON_TESTS_LOAD_SOAK_CLIENT_H_

// One of the soak test's concurrent clients: a loop of read-only sessions
// (stats and reads of random units), writable sessions (read, add a delta,
// write, read back, close with writeback) and session listings until a
// deadline, timing every call and sorting its outcomes into successes,
// expected refusals and unexpected errors.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/load/soak_model.h"

namespace summon::load {

enum class Op {
  kOpenReadOnly,
  kOpenWritable,
  kStats,
  kRead,
  kWrite,
  kCloseReadOnly,
  kCloseWriteback,
  kListSessions,
};
inline constexpr int kOpCount = 8;

absl::string_view OpName(Op op);

struct SoakOptions {
  // gRPC target of the node the client talks to.
  // Client i talks to targets[i % size], spreading clients over the nodes.
  std::vector<std::string> targets;
  std::string model;
  // No new session or listing starts after this; the one in flight ends.
  absl::Time end;
  // Deadline of every call: a hang surfaces as DEADLINE_EXCEEDED.
  absl::Duration call_timeout = absl::Seconds(30);
  // Of all iterations: the share that lists sessions, and the share that
  // opens a writable session; the rest open read-only sessions.
  double list_fraction = 0.05;
  double write_fraction = 0.4;
  // Of writable sessions: the share on a hot unit (shared by many clients,
  // so opens collide under R2) instead of the client's own unit.
  double hot_fraction = 0.25;
  // Sessions over one channel before the client drops it and connects anew,
  // so connections come and go during the run as clients do.
  int sessions_per_channel = 16;
};

// A writeback that succeeded: the unit's generation after it and the delta
// it added to every element.
struct Writeback {
  int tensor = 0;
  uint64_t generation = 0;
  double delta = 0;
};

struct ClientReport {
  // Milliseconds of every successful call, per Op.
  std::array<std::vector<double>, kOpCount> latencies_ms;
  // Expected refusals: FAILED_PRECONDITION for a writable open of a unit
  // another client holds (R2).
  std::array<int64_t, kOpCount> refused{};
  // Any other error, and data that is not seeded + a sum of deltas.
  std::array<int64_t, kOpCount> unexpected{};
  // The first few unexpected errors, "client C OP: STATUS".
  std::vector<std::string> errors;
  std::vector<Writeback> writebacks;
};

// What a client is doing, read by the test's watchdog from another thread.
struct ClientProgress {
  // The Op in flight, -1 between calls.
  std::atomic<int> op{-1};
  std::atomic<int64_t> op_started_unix_ms{0};
  std::atomic<bool> done{false};
};

// The principal client `index` sends (each client owns its sessions, R12).
std::string PrincipalOf(int index);

// Runs client `index` until options.end. Its own unit is tensor `index` of
// `model` (which needs at least index + 1 private units). Sets
// progress.done before returning.
ClientReport RunSoakClient(int index, const SoakModel& model,
                           const SoakOptions& options,
                           ClientProgress& progress);

}  // namespace summon::load

#endif  // SUMMON_TESTS_LOAD_SOAK_CLIENT_H_
