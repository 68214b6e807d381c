// Issue 21's cost goal on a GPU: a watch's statistics pass over device
// memory (server/gpu/watch_kernels.cu: sums, min/max, NaN/Inf, histogram)
// beside a device-to-device cudaMemcpy of the same bytes, in one run. The
// goal is a pass within one shard read: ratio (memcpy time / pass time)
// >= 0.5. Prints nothing but a note where no CUDA device is present.
//   bazel-bin/bench/watch_gpu_bench [--iters=N]

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/watch_stats.h"
#include "server/gpu/device_stats.h"
#include "server/gpu/device_watch.h"

ABSL_FLAG(int, iters, 5, "Timed iterations per size (the best is shown).");

namespace {

using summon::core::DType;

double BestSeconds(int iters, const std::function<bool()>& run) {
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!run()) return -1;
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const absl::Status available = summon::server::gpu::CudaDeviceAvailable();
      !available.ok()) {
    std::printf("# watch_gpu_bench: no CUDA device (%s)\n",
                std::string(available.message()).c_str());
    return 0;
  }
  const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
  std::printf(
      "# watch pass (32 bins, a record after the first) vs cudaMemcpy "
      "device to device, float32, best of %d\n"
      "#    size(B)   pass(us)  pass GB/s  memcpy(us)  memcpy GB/s  ratio\n",
      iters);
  for (const int64_t bytes : {int64_t{16} << 20, int64_t{256} << 20}) {
    void* source = nullptr;
    void* copy = nullptr;
    if (cudaMalloc(&source, bytes) != cudaSuccess ||
        cudaMalloc(&copy, bytes) != cudaSuccess) {
      std::fprintf(stderr, "cudaMalloc of %lld bytes failed\n",
                   static_cast<long long>(bytes));
      return 1;
    }
    // Bytes 0x3c: every float is 0.0117..., inside the range below.
    cudaMemset(source, 0x3c, bytes);
    cudaDeviceSynchronize();
    const double memcpy_s = BestSeconds(iters, [&] {
      return cudaMemcpy(copy, source, bytes, cudaMemcpyDeviceToDevice) ==
                 cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess;
    });
    const int64_t count = bytes / 4;
    int64_t counted = 0;
    const double pass_s = BestSeconds(iters, [&] {
      summon::core::WatchPartial partial =
          summon::core::EmptyWatchPartial(32, true);
      const absl::Status status =
          summon::server::gpu::AccumulateDeviceWatchPartial(
              DType::kFloat32, source, count,
              summon::core::HistogramRange{-1, 1}, &partial);
      if (!status.ok()) {
        std::fprintf(stderr, "watch pass: %s\n", status.ToString().c_str());
        return false;
      }
      counted = partial.finite;
      return true;
    });
    cudaFree(copy);
    cudaFree(source);
    if (pass_s < 0 || memcpy_s < 0 || counted != count) {
      std::fprintf(stderr, "the pass failed or counted %lld of %lld\n",
                   static_cast<long long>(counted),
                   static_cast<long long>(count));
      return 1;
    }
    std::printf("%12lld %10.1f %10.1f %11.1f %12.1f %6.2f\n",
                static_cast<long long>(bytes), pass_s * 1e6,
                bytes / pass_s / 1e9, memcpy_s * 1e6, bytes / memcpy_s / 1e9,
                memcpy_s / pass_s);
  }
  return 0;
}
