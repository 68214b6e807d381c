#ifndef SUMMON_SERVER_GPU_WATCH_KERNELS_H_
#define SUMMON_SERVER_GPU_WATCH_KERNELS_H_

// The CUDA side of a watch's partial statistics over device-placed shards
// (watch_kernels.cu); device_watch.h is the C++ side. Free of Abseil and of
// CUDA headers, as stats_kernels.h, so that nvcc and gcc both compile it.

#include <cstdint>

#include "server/gpu/stats_kernels.h"

namespace summon::server::gpu {

// The numbers a watch kernel hands back (core::WatchPartial's, less the
// histogram, which comes back beside it as bins + 2 slots: below the range,
// the bins, above it). min and max are +Inf and -Inf when finite is 0.
struct WatchKernelResult {
  unsigned long long finite;
  unsigned long long nan;
  unsigned long long inf;
  double sum;
  double sum_of_squares;
  double min;
  double max;
  double abs_max;
};

// The most bins a watch histogram has (core::CheckStatisticsArguments').
inline constexpr int kMaxWatchBins = 4096;

// The histogram a launch fills: `bins` > 0 equal bins over [lower, upper],
// slots computed by core/watch_bins.h with `scale` = core::WatchBinScale.
struct WatchKernelRange {
  double lower;
  double upper;
  double scale;
  int bins;
};

// Reduces the `numel` elements of `element` at `device_data` (memory of the
// current device) in one pass on this thread's default stream
// (cudaStreamPerThread, so a watch's tasks on several GPUs, or beside other
// work of this process, do not wait for each other): NaN and Inf counted and
// left out of everything else, as core::AccumulateWatchPartial does. With a
// range (non-null), also bins the finite elements into `slots` (host
// memory, range->bins + 2 entries); null: the first record's range pass.
// Only the result and the slots come back (a few hundred bytes to 32 KiB).
// Returns the cudaError_t as an int (0: success); numel must be > 0 and
// range->bins in [1, kMaxWatchBins] (device_watch.cc checks both).
int ComputeWatchPartial(const void* device_data, StatsElement element,
                        int64_t numel, const WatchKernelRange* range,
                        WatchKernelResult* result, unsigned long long* slots);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_WATCH_KERNELS_H_
