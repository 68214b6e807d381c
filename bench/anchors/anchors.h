#ifndef SUMMON_BENCH_ANCHORS_ANCHORS_H_
#define SUMMON_BENCH_ANCHORS_ANCHORS_H_

// The physical anchors summon's figures are compared with (issue 11): what
// the machine does with the same bytes when nothing but the copy, the wire
// or the socket is in the way. summon_bench --compare measures them in the
// same run as summon's operations, so both see the same load.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace summon::bench {

// How many times an anchor runs: `warmup` untimed, then `iters` timed.
struct AnchorRuns {
  int64_t bytes = 0;
  int warmup = 1;
  int iters = 3;
};

// memcpy of `bytes` between two buffers whose pages were touched before the
// first iteration (no page faults): the bandwidth of one copy per byte.
// Microseconds of each timed iteration.
absl::StatusOr<std::vector<double>> MemcpyMicros(const AnchorRuns& runs);

// The first-touch anchor: each iteration maps fresh anonymous memory of
// `bytes` (2 MiB aligned) and copies a warm buffer into it, so every page is
// faulted in (and zeroed by the kernel) on first write, as a buffer that was
// handed back to the system and allocated again is. With `huge_pages` the
// mapping gets madvise(MADV_HUGEPAGE) first: where transparent huge pages
// are `always` or `madvise` a fault maps 2 MiB at once; where they are
// `never` both variants fault 4 KiB pages. The time of mmap, madvise and the
// copy; the munmap is not timed.
absl::StatusOr<std::vector<double>> FirstTouchMicros(const AnchorRuns& runs,
                                                     bool huge_pages);

// One TCP connection over loopback: the sender writes `bytes` in
// `write_bytes` writes, the receiver reads them into a warm buffer of the
// full size and answers one byte; an iteration is timed from the first
// write to that answer.
absl::StatusOr<std::vector<double>> LoopbackTcpMicros(
    const AnchorRuns& runs, int64_t write_bytes = int64_t{1} << 20);

// Gloo's allgather (Debian's libgloo, TCP over loopback) of `runs.bytes` in
// all, `world` processes contributing runs.bytes / world each (the last one
// the remainder is dropped: bytes are rounded down to a multiple of world).
// The processes are `anchor_binary gloo_worker ...` (bench/anchors:anchor)
// started here and rendezvousing through a temporary directory; each
// iteration starts after a barrier and its time is rank 0's.
absl::StatusOr<std::vector<double>> GlooAllgatherMicros(
    const std::string& anchor_binary, int world, const AnchorRuns& runs);

// One rank of GlooAllgatherMicros, run inside a worker process: connects
// through a gloo FileStore in `store_dir` and returns its timed iterations.
absl::StatusOr<std::vector<double>> GlooAllgatherWorker(
    int rank, int world, const std::string& store_dir, const AnchorRuns& runs);

// The anchor binary installed beside the running program
// (<dir of /proc/self/exe>/anchors/anchor, as Bazel lays out //bench and
// //bench/anchors), or `override_path` when non-empty.
std::string AnchorBinaryPath(const std::string& override_path);

}  // namespace summon::bench

#endif  // SUMMON_BENCH_ANCHORS_ANCHORS_H_
