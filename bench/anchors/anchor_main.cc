// anchor: runs one of bench/anchors' anchors on its own, and is the worker
// process of the Gloo anchor that summon_bench --compare starts.
//
//   anchor memcpy --bytes 268435456
//   anchor tcp --bytes 268435456
//   anchor gloo --world 2 --bytes 268435456
//   anchor gloo_worker --rank R --world W --store DIR ...  (one line per
//                                                           timed iteration)

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "bench/anchors/anchors.h"
#include "bench/nccl_table.h"

ABSL_FLAG(int64_t, bytes, int64_t{256} << 20, "Bytes moved per iteration.");
ABSL_FLAG(int32_t, iters, 5, "Timed iterations.");
ABSL_FLAG(int32_t, warmup, 1, "Untimed iterations before the timed ones.");
ABSL_FLAG(int32_t, world, 2, "gloo: processes taking part.");
ABSL_FLAG(int32_t, rank, 0, "gloo_worker: this process's rank.");
ABSL_FLAG(std::string, store, "",
          "gloo_worker: the directory of the rendezvous FileStore.");

namespace summon::bench {
namespace {

int Run(const std::string& anchor) {
  AnchorRuns runs;
  runs.bytes = absl::GetFlag(FLAGS_bytes);
  runs.iters = absl::GetFlag(FLAGS_iters);
  runs.warmup = absl::GetFlag(FLAGS_warmup);
  absl::StatusOr<std::vector<double>> us;
  if (anchor == "memcpy") {
    us = MemcpyMicros(runs);
  } else if (anchor == "tcp") {
    us = LoopbackTcpMicros(runs);
  } else if (anchor == "gloo") {
    // The workers are this same binary.
    us =
        GlooAllgatherMicros("/proc/self/exe", absl::GetFlag(FLAGS_world), runs);
  } else if (anchor == "gloo_worker") {
    us = GlooAllgatherWorker(absl::GetFlag(FLAGS_rank),
                             absl::GetFlag(FLAGS_world),
                             absl::GetFlag(FLAGS_store), runs);
    if (!us.ok()) {
      std::fprintf(stderr, "anchor: %s\n", us.status().ToString().c_str());
      return 1;
    }
    // Rank 0's timings are the anchor's; the others print nothing.
    if (absl::GetFlag(FLAGS_rank) == 0) {
      for (double sample : *us) std::printf("%.1f\n", sample);
    }
    return 0;
  } else {
    std::fprintf(stderr, "anchor: unknown anchor '%s'\n", anchor.c_str());
    return 2;
  }
  if (!us.ok()) {
    std::fprintf(stderr, "anchor: %s\n", us.status().ToString().c_str());
    return 1;
  }
  const double median = Median(*us);
  std::printf("%s %ld bytes: median %.1f us (%.2f GB/s) over %zu iterations\n",
              anchor.c_str(), static_cast<long>(runs.bytes), median,
              median > 0 ? runs.bytes / median / 1e3 : 0.0, us->size());
  return 0;
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "runs one anchor of summon_bench --compare: memcpy, tcp, gloo (or "
      "gloo_worker, one rank of gloo).\n  anchor memcpy --bytes 268435456");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: anchor memcpy|tcp|gloo|gloo_worker [flags]\n");
    return 2;
  }
  return summon::bench::Run(args[1]);
}
