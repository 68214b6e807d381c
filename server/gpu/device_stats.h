#ifndef SUMMON_SERVER_GPU_DEVICE_STATS_H_
#define SUMMON_SERVER_GPU_DEVICE_STATS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor_stats.h"

namespace summon::server::gpu {

// OK when this process sees a CUDA device; otherwise UNAVAILABLE saying why
// (no driver, no device), for tests to print when they skip.
absl::Status CudaDeviceAvailable();

// core::ComputeTensorStatistics (server/tensor_stats.h) for `numel` elements in
// device memory at `device_data`, computed by CUDA kernels on the device
// that holds them: only the numbers come back. The same contract: NaN and
// Inf counted and left out, min/max/counts/histogram exactly as on the CPU;
// mean and L2 norm equal up to the order of the sums. INVALID_ARGUMENT for a
// non-floating dtype or bins outside [0, 4096]; INTERNAL naming the CUDA
// error when a kernel or copy fails.
absl::StatusOr<core::TensorStatistics> ComputeDeviceTensorStatistics(
    core::DType dtype, const void* device_data, int64_t numel, int bins);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_DEVICE_STATS_H_
