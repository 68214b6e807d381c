// Tensor statistics where the data is: a grid-stride pass folding min, max,
// sum, sum of squares and the finite/NaN/Inf counts per block, and a
// histogram pass with per-block bins in shared memory. Values are taken as
// doubles, as the CPU version (core/tensor_stats.cc) does, so min, max,
// the counts and every bin agree exactly; sums differ only by order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "server/gpu/stats_kernels.h"

namespace summon::server::gpu {
namespace {

constexpr int kThreads = 256;

__device__ double Load(const void* data, StatsElement element, int64_t i) {
  switch (element) {
    case StatsElement::kFloat32:
      return static_cast<const float*>(data)[i];
    case StatsElement::kFloat64:
      return static_cast<const double*>(data)[i];
    case StatsElement::kFloat16:
      return __half2float(static_cast<const __half*>(data)[i]);
    case StatsElement::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
  }
  return 0;
}

__global__ void PartialStatsKernel(const void* data, StatsElement element,
                                   int64_t numel, StatsPartial* partials) {
  StatsPartial mine = {INFINITY, -INFINITY, 0, 0, 0, 0, 0};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < numel; i += stride) {
    const double value = Load(data, element, i);
    if (isnan(value)) {
      ++mine.nan;
    } else if (isinf(value)) {
      ++mine.inf;
    } else {
      mine.min = fmin(mine.min, value);
      mine.max = fmax(mine.max, value);
      mine.sum += value;
      mine.sum_of_squares += value * value;
      ++mine.finite;
    }
  }
  __shared__ StatsPartial block[kThreads];
  block[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      StatsPartial& a = block[threadIdx.x];
      const StatsPartial& b = block[threadIdx.x + half];
      a.min = fmin(a.min, b.min);
      a.max = fmax(a.max, b.max);
      a.sum += b.sum;
      a.sum_of_squares += b.sum_of_squares;
      a.finite += b.finite;
      a.nan += b.nan;
      a.inf += b.inf;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = block[0];
}

__global__ void HistogramKernel(const void* data, StatsElement element,
                                int64_t numel, double min, double width,
                                int bins, unsigned long long* counts) {
  extern __shared__ unsigned long long local[];
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < numel; i += stride) {
    const double value = Load(data, element, i);
    if (!isfinite(value)) continue;
    int bin = static_cast<int>((value - min) / width);
    bin = bin < 0 ? 0 : (bin >= bins ? bins - 1 : bin);
    atomicAdd(&local[bin], 1ULL);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&counts[b], local[b]);
  }
}

int BlocksFor(int64_t numel) {
  const int64_t wanted = (numel + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 1 ? 1
                          : wanted > kMaxStatsBlocks ? kMaxStatsBlocks
                                                     : wanted);
}

}  // namespace

int ComputeStatsPartials(const void* device_data, StatsElement element,
                         int64_t numel, StatsPartial* partials, int* blocks) {
  *blocks = BlocksFor(numel);
  StatsPartial* device_partials = nullptr;
  cudaError_t error = cudaMalloc(&device_partials,
                                 sizeof(StatsPartial) * static_cast<size_t>(*blocks));
  if (error != cudaSuccess) return error;
  PartialStatsKernel<<<*blocks, kThreads>>>(device_data, element, numel,
                                            device_partials);
  error = cudaGetLastError();
  if (error == cudaSuccess) {
    error = cudaMemcpy(partials, device_partials,
                       sizeof(StatsPartial) * static_cast<size_t>(*blocks),
                       cudaMemcpyDeviceToHost);
  }
  cudaFree(device_partials);
  return error;
}

int ComputeStatsHistogram(const void* device_data, StatsElement element,
                          int64_t numel, double min, double width, int bins,
                          unsigned long long* counts) {
  const size_t bytes = sizeof(unsigned long long) * static_cast<size_t>(bins);
  unsigned long long* device_counts = nullptr;
  cudaError_t error = cudaMalloc(&device_counts, bytes);
  if (error != cudaSuccess) return error;
  error = cudaMemset(device_counts, 0, bytes);
  if (error == cudaSuccess) {
    HistogramKernel<<<BlocksFor(numel), kThreads, bytes>>>(
        device_data, element, numel, min, width, bins, device_counts);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) {
    error = cudaMemcpy(counts, device_counts, bytes, cudaMemcpyDeviceToHost);
  }
  cudaFree(device_counts);
  return error;
}

int CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  return error == cudaSuccess ? count : -static_cast<int>(error);
}

const char* CudaErrorText(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace summon::server::gpu
