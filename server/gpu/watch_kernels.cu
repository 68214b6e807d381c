// A watch's partial statistics where the shard is: one grid-stride pass
// folding count, NaN/Inf counts, sum, sum of squares, min, max and abs max
// per thread, reduced per block (warp shuffles, then shared memory), and,
// with a range, the histogram counted in shared memory per warp and added
// to global slots once per block. The last block to finish folds the
// blocks' partials in block order, so the result does not depend on
// scheduling, and two small copies bring it and the slots back. Values are
// taken as doubles (exact for every dtype), NaN/Inf are left out of everything
// but their counts, and bins come from core/watch_bins.h, as on the CPU
// (core/watch_stats.cc): counts, min, max, abs max and every bin agree
// exactly; sums differ only by the order they are added in.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/watch_bins.h"
#include "server/gpu/watch_kernels.h"

namespace summon::server::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 1024;
// Shared memory for the per-warp histogram copies; with more bins than fit,
// the block shares one copy.
constexpr size_t kSharedHistogramBytes = 32 * 1024;

__device__ double ToDouble(float value) { return value; }
__device__ double ToDouble(double value) { return value; }
__device__ double ToDouble(__half value) { return __half2float(value); }
__device__ double ToDouble(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

__device__ void Fold(WatchKernelResult& into, const WatchKernelResult& other) {
  into.finite += other.finite;
  into.nan += other.nan;
  into.inf += other.inf;
  into.sum += other.sum;
  into.sum_of_squares += other.sum_of_squares;
  into.min = fmin(into.min, other.min);
  into.max = fmax(into.max, other.max);
  into.abs_max = fmax(into.abs_max, other.abs_max);
}

__device__ WatchKernelResult ShuffleDown(const WatchKernelResult& mine,
                                         int delta) {
  constexpr unsigned kAll = 0xffffffffu;
  WatchKernelResult other;
  other.finite = __shfl_down_sync(kAll, mine.finite, delta);
  other.nan = __shfl_down_sync(kAll, mine.nan, delta);
  other.inf = __shfl_down_sync(kAll, mine.inf, delta);
  other.sum = __shfl_down_sync(kAll, mine.sum, delta);
  other.sum_of_squares = __shfl_down_sync(kAll, mine.sum_of_squares, delta);
  other.min = __shfl_down_sync(kAll, mine.min, delta);
  other.max = __shfl_down_sync(kAll, mine.max, delta);
  other.abs_max = __shfl_down_sync(kAll, mine.abs_max, delta);
  return other;
}

__device__ WatchKernelResult Empty() {
  return WatchKernelResult{0, 0, 0, 0.0, 0.0, INFINITY, -INFINITY, 0.0};
}

// `scratch`: the blocks' partials; `done`: zero before the launch; `result`
// and `slots` (range->bins + 2, zero before the launch) what comes back.
// Dynamic shared memory: `copies` x (bins + 2) unsigned counters. A
// block's counters hold at most numel / blocks elements: below 2^32 for
// any shard (2^32 x kMaxBlocks elements would be 16 TiB of float32).
template <typename T>
__global__ void WatchKernel(const T* __restrict__ data, int64_t numel,
                            WatchKernelRange range, int binning, int copies,
                            WatchKernelResult* scratch, unsigned int* done,
                            WatchKernelResult* result,
                            unsigned long long* slots) {
  extern __shared__ unsigned int shared_slots[];
  const int width = range.bins + 2;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (binning) {
    for (int s = threadIdx.x; s < copies * width; s += blockDim.x) {
      shared_slots[s] = 0;
    }
    __syncthreads();
  }
  unsigned int* my_slots = shared_slots + (copies > 1 ? warp * width : 0);
  WatchKernelResult mine = Empty();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < numel; i += stride) {
    const double value = ToDouble(data[i]);
    if (isnan(value)) {
      ++mine.nan;
      continue;
    }
    if (isinf(value)) {
      ++mine.inf;
      continue;
    }
    ++mine.finite;
    mine.sum += value;
    mine.sum_of_squares += value * value;
    mine.min = fmin(mine.min, value);
    mine.max = fmax(mine.max, value);
    mine.abs_max = fmax(mine.abs_max, fabs(value));
    if (binning) {
      atomicAdd(&my_slots[core::WatchHistogramSlot(
                    value, range.lower, range.upper, range.scale, range.bins)],
                1u);
    }
  }
  // Within each warp, then the warps' leaders through shared memory.
  for (int delta = 16; delta > 0; delta /= 2) {
    const WatchKernelResult other = ShuffleDown(mine, delta);
    Fold(mine, other);
  }
  __shared__ WatchKernelResult warps[kWarps];
  __shared__ bool last_block;
  if (lane == 0) warps[warp] = mine;
  __syncthreads();
  if (binning) {
    for (int s = threadIdx.x; s < width; s += blockDim.x) {
      unsigned long long count = 0;
      for (int c = 0; c < copies; ++c) count += shared_slots[c * width + s];
      if (count != 0) atomicAdd(&slots[s], count);
    }
  }
  if (threadIdx.x == 0) {
    WatchKernelResult block = warps[0];
    for (int w = 1; w < kWarps; ++w) Fold(block, warps[w]);
    scratch[blockIdx.x] = block;
    // The partial (and this block's slots) before the ticket: the last
    // block reads every other block's.
    __threadfence();
    last_block = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last_block || threadIdx.x != 0) return;
  __threadfence();
  WatchKernelResult all = Empty();
  for (unsigned int b = 0; b < gridDim.x; ++b) {
    // From L2 (__ldcg), where the other blocks' writes are, not from a
    // stale L1 line.
    const WatchKernelResult* block = scratch + b;
    WatchKernelResult numbers;
    numbers.finite = __ldcg(&block->finite);
    numbers.nan = __ldcg(&block->nan);
    numbers.inf = __ldcg(&block->inf);
    numbers.sum = __ldcg(&block->sum);
    numbers.sum_of_squares = __ldcg(&block->sum_of_squares);
    numbers.min = __ldcg(&block->min);
    numbers.max = __ldcg(&block->max);
    numbers.abs_max = __ldcg(&block->abs_max);
    Fold(all, numbers);
  }
  *result = all;
}

int BlocksFor(int64_t numel) {
  const int64_t wanted = (numel + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 1            ? 1
                          : wanted > kMaxBlocks ? kMaxBlocks
                                                : wanted);
}

template <typename T>
cudaError_t Launch(const void* data, int64_t numel,
                   const WatchKernelRange& range, bool binning, int blocks,
                   WatchKernelResult* scratch, unsigned int* done,
                   WatchKernelResult* result, unsigned long long* slots,
                   cudaStream_t stream) {
  const size_t width = binning ? static_cast<size_t>(range.bins) + 2 : 0;
  const int copies =
      width * kWarps * sizeof(unsigned int) <= kSharedHistogramBytes ? kWarps
                                                                     : 1;
  const size_t shared =
      width * static_cast<size_t>(copies) * sizeof(unsigned int);
  WatchKernel<T><<<blocks, kThreads, shared, stream>>>(
      static_cast<const T*>(data), numel, range, binning ? 1 : 0, copies,
      scratch, done, result, slots);
  return cudaGetLastError();
}

}  // namespace

int ComputeWatchPartial(const void* device_data, StatsElement element,
                        int64_t numel, const WatchKernelRange* range,
                        WatchKernelResult* result, unsigned long long* slots) {
  const cudaStream_t stream = cudaStreamPerThread;
  const bool binning = range != nullptr;
  const WatchKernelRange used =
      binning ? *range : WatchKernelRange{0.0, 0.0, 0.0, 0};
  const int blocks = BlocksFor(numel);
  const size_t slot_count = binning ? static_cast<size_t>(used.bins) + 2 : 0;
  // One stream-ordered allocation (no device-wide synchronisation, unlike
  // cudaMalloc/cudaFree): [result][slots][done][blocks' partials], the
  // first three zeroed by one memset.
  const size_t done_offset =
      sizeof(WatchKernelResult) + slot_count * sizeof(unsigned long long);
  constexpr size_t kAlign = 16;
  const size_t scratch_offset =
      (done_offset + sizeof(unsigned int) + kAlign - 1) / kAlign * kAlign;
  const size_t bytes =
      scratch_offset + sizeof(WatchKernelResult) * static_cast<size_t>(blocks);
  void* memory = nullptr;
  cudaError_t error = cudaMallocAsync(&memory, bytes, stream);
  if (error != cudaSuccess) return error;
  auto* base = static_cast<unsigned char*>(memory);
  auto* device_result = reinterpret_cast<WatchKernelResult*>(base);
  auto* device_slots =
      reinterpret_cast<unsigned long long*>(base + sizeof(WatchKernelResult));
  auto* done = reinterpret_cast<unsigned int*>(base + done_offset);
  auto* scratch = reinterpret_cast<WatchKernelResult*>(base + scratch_offset);
  error = cudaMemsetAsync(base, 0, scratch_offset, stream);
  if (error == cudaSuccess) {
    switch (element) {
      case StatsElement::kFloat32:
        error =
            Launch<float>(device_data, numel, used, binning, blocks, scratch,
                          done, device_result, device_slots, stream);
        break;
      case StatsElement::kFloat64:
        error =
            Launch<double>(device_data, numel, used, binning, blocks, scratch,
                           done, device_result, device_slots, stream);
        break;
      case StatsElement::kFloat16:
        error =
            Launch<__half>(device_data, numel, used, binning, blocks, scratch,
                           done, device_result, device_slots, stream);
        break;
      case StatsElement::kBFloat16:
        error = Launch<__nv_bfloat16>(device_data, numel, used, binning, blocks,
                                      scratch, done, device_result,
                                      device_slots, stream);
        break;
    }
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(result, device_result, sizeof(WatchKernelResult),
                            cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess && binning) {
    error = cudaMemcpyAsync(slots, device_slots,
                            slot_count * sizeof(unsigned long long),
                            cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t freed = cudaFreeAsync(memory, stream);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return error;
  return freed != cudaSuccess ? freed : synced;
}

}  // namespace summon::server::gpu
