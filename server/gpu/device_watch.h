#ifndef SUMMON_SERVER_GPU_DEVICE_WATCH_H_
#define SUMMON_SERVER_GPU_DEVICE_WATCH_H_

// A watch's partial statistics over device memory (issue 21): what
// core::AccumulateWatchPartial does for host bytes, computed by CUDA
// kernels (watch_kernels.cu) on the GPU that holds the elements, so a
// watch of device-placed shards reads them where they are and only the
// numbers cross to the host.

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/watch_stats.h"

namespace summon::server::gpu {

// Adds the `numel` elements of `dtype` at `device_data` (memory of the
// calling thread's current CUDA device) into `partial`, exactly as
// core::AccumulateWatchPartial would from a host copy: NaN and Inf counted
// and left out of every other field; with `range` and a histogram in
// `partial`, the finite elements binned by core/watch_bins.h; counts,
// min, max, abs max and bins equal, sums equal up to the order of the
// additions. Checked before any device work (so without a GPU too):
// INVALID_ARGUMENT for a non-floating dtype (the CPU kernel's message), a
// negative numel, a null partial or device address, or a histogram of more
// than 4096 bins. INTERNAL naming the CUDA error when the kernel or a copy
// fails.
absl::Status AccumulateDeviceWatchPartial(
    core::DType dtype, const void* device_data, int64_t numel,
    const std::optional<core::HistogramRange>& range,
    core::WatchPartial* partial);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_DEVICE_WATCH_H_
