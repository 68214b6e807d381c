#ifndef SUMMON_SERVER_GPU_STATS_KERNELS_H_
#define SUMMON_SERVER_GPU_STATS_KERNELS_H_

// The CUDA side of device tensor statistics (stats_kernels.cu), kept free of
// Abseil and of CUDA headers so that nvcc and gcc both compile its users.

#include <cstdint>

namespace summon::server::gpu {

// Element types the kernels read (the floating dtypes of core::DType).
enum class StatsElement : int { kFloat32, kFloat64, kFloat16, kBFloat16 };

// What one thread block saw; the host folds the blocks in order.
struct StatsPartial {
  double min;
  double max;
  double sum;
  double sum_of_squares;
  unsigned long long finite;
  unsigned long long nan;
  unsigned long long inf;
};

// Most blocks the partial pass uses (so `partials` has room for this many).
inline constexpr int kMaxStatsBlocks = 1024;

// Fills `partials` (host memory, kMaxStatsBlocks entries) from the `numel`
// elements at `device_data`, and sets *blocks to how many it used. Returns
// the cudaError_t as an int (0: success).
int ComputeStatsPartials(const void* device_data, StatsElement element,
                         int64_t numel, StatsPartial* partials, int* blocks);

// Counts the finite elements into `bins` equal-width bins starting at `min`
// (`width` > 0; the last bin takes everything at or beyond its start, as the
// CPU version). `counts`: host memory of `bins` entries. cudaError_t as int.
int ComputeStatsHistogram(const void* device_data, StatsElement element,
                          int64_t numel, double min, double width, int bins,
                          unsigned long long* counts);

// The number of CUDA devices, or a negative cudaError_t when the runtime
// cannot tell (no driver, no device).
int CudaDeviceCount();
// The runtime's text for a cudaError_t.
const char* CudaErrorText(int error);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_STATS_KERNELS_H_
