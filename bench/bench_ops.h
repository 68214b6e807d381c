#ifndef SUMMON_BENCH_BENCH_OPS_H_
#define SUMMON_BENCH_BENCH_OPS_H_

// The operations summon_bench times through the real gRPC client: session
// open (the gather), ReadTensor, close with writeback, and open+close of a
// tiny session; each checks the bytes it moved against the seeded init.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/nccl_table.h"
#include "client/lib/summon_client.h"

namespace summon::bench {

inline constexpr char kModel[] = "summon_bench";
inline constexpr uint64_t kSeed = 7;

// One unit of the benchmark model holding one float32 parameter.
struct BenchTensor {
  std::string unit;
  std::string fqn;
  int64_t bytes = 0;
  int64_t numel() const { return bytes / 4; }
};

BenchTensor TensorOfSize(absl::string_view unit, int64_t bytes);

// A unit holding a small parameter beside a large one: opening the small
// one alone (a ParamList scope) against opening the whole unit (issue 11,
// P5).
struct SplitUnit {
  std::string unit;
  BenchTensor small;
  BenchTensor large;
  int64_t bytes() const { return small.bytes + large.bytes; }
};

// `unit` of `total_bytes` with a `small_bytes` parameter first.
SplitUnit SplitUnitOf(absl::string_view unit, int64_t total_bytes,
                      int64_t small_bytes);

// One FULL_SHARD model with a unit per tensor, each unit opened on its own
// (recurse=false), so every size is one model and one CreateModel call;
// plus `split`'s unit when given.
std::string LayoutJson(const std::vector<BenchTensor>& tensors,
                       const SplitUnit* split = nullptr);

struct BenchConfig {
  int group_size = 1;
  int iters = 5;
  int warmup = 1;
  int64_t large_bytes = 0;
  int large_iters = 3;
  int tiny_repeats = 500;
  int64_t full_check_bytes = 0;
  uint32_t read_chunk_bytes = 0;
  // Cold mode (--idle_ms): how long to wait before each timed iteration, so
  // that every retention (the session-copy pool, spare staging) has lapsed
  // and the operation meets memory as a user's first one after a pause does.
  absl::Duration idle = absl::ZeroDuration();
  // The writeback table (--hold_ms): how long the session stays open after
  // its WriteTensor before the timed close, as a user's does while looking.
  absl::Duration hold = absl::ZeroDuration();

  int ItersFor(int64_t bytes) const {
    return bytes > large_bytes ? large_iters : iters;
  }
};

// The timed microseconds of each iteration (warmup left out) and the wrong
// elements found when the result was checked.
struct Measured {
  std::vector<double> us;
  int64_t wrong = 0;
};

class Bench {
 public:
  Bench(const client::SummonClient& client, BenchConfig config)
      : client_(client), config_(config) {}

  const BenchConfig& config() const { return config_; }

  absl::StatusOr<Measured> Open(const BenchTensor& tensor) const;
  // ReadTensor of the whole tensor into a fresh result, as its callers get.
  absl::StatusOr<Measured> Read(const BenchTensor& tensor) const;
  // ReadTensorChunks into one buffer the client already holds (its pages
  // mapped, as the loopback TCP anchor's receiver's are).
  absl::StatusOr<Measured> ReadIntoHeldBuffer(const BenchTensor& tensor) const;
  // The same-node read path: MapSession (grant, redeem, map) and a copy of
  // the tensor out of the mapping into a buffer the client holds (warm
  // pages, as the memcpy anchor's), then the unmap.
  absl::StatusOr<Measured> LocalRead(const BenchTensor& tensor) const;
  absl::StatusOr<Measured> Writeback(const BenchTensor& tensor) const;
  absl::StatusOr<LatencyRow> OpenClose(const BenchTensor& tensor,
                                       bool writeback) const;
  // Read-only open of `split`'s small parameter alone, or of its whole unit
  // (the close is not timed).
  absl::StatusOr<LatencyRow> OpenSplit(const SplitUnit& split,
                                       bool whole_unit) const;

 private:
  absl::StatusOr<Measured> ReadWhole(const BenchTensor& tensor,
                                     bool into_held_buffer) const;
  // Opens a session with `options` (timed, microseconds) and closes it (not
  // timed).
  absl::StatusOr<double> TimedOpen(const v1::SessionOptions& options) const;
  // Runs `iteration` warmup + `iters` times; returns the timed microseconds
  // each reported, warmup left out. `cold`: waits config().idle before each
  // timed iteration (the bandwidth tables; the latency tables repeat too
  // often for that).
  absl::StatusOr<std::vector<double>> Repeat(
      int iters, const std::function<absl::StatusOr<double>()>& iteration,
      bool cold = true) const;
  // Opens a read-only session on `tensor` and counts the elements that
  // differ from `factor` times the seeded init (CheckedRanges).
  absl::StatusOr<int64_t> VerifyStored(const BenchTensor& tensor,
                                       float factor) const;
  absl::StatusOr<client::TensorData> ReadRange(const std::string& session,
                                               const BenchTensor& tensor,
                                               int64_t first,
                                               int64_t count) const;
  absl::Status Close(const std::string& session) const;

  const client::SummonClient& client_;
  const BenchConfig config_;
};

}  // namespace summon::bench

#endif  // SUMMON_BENCH_BENCH_OPS_H_
