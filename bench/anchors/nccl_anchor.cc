// The GPU anchors bench/gpu_bench.sh prints beside `summon_bench --device
// cuda`: a raw NCCL all-gather of the same bytes across every visible GPU
// (one communicator per GPU in this process, in place, bytes/W per rank),
// cudaMemcpy device-to-host into warm pageable and pinned host memory (the
// copy a device-placed summond makes for an offload_to_cpu session copy),
// and device-to-device on GPU 0 (how it fills a session copy in device
// memory) and, with two or more GPUs, from GPU 1 to GPU 0 (cudaMemcpyPeer:
// another GPU's shards into that copy).
//
//   nccl_anchor --bytes=268435456 --iters=5
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(std::vector<std::string>, bytes,
          std::vector<std::string>({"1048576", "16777216", "268435456"}),
          "Bytes moved per iteration (all ranks together), one row each.");
ABSL_FLAG(int32_t, iters, 5, "Timed iterations (the median is printed).");

namespace {

#define CHECK_CUDA(call)                                              \
  do {                                                                \
    const cudaError_t error = (call);                                 \
    if (error != cudaSuccess) {                                       \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(error)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)
#define CHECK_NCCL(call)                                              \
  do {                                                                \
    const ncclResult_t result = (call);                               \
    if (result != ncclSuccess) {                                      \
      std::fprintf(stderr, "%s: %s\n", #call, ncclGetErrorString(result)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

template <typename Body>
double MedianSeconds(int iters, Body body) {
  body();  // Warm-up: first-touch, NCCL connection setup.
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    seconds.push_back(std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int gpus = 0;
  CHECK_CUDA(cudaGetDeviceCount(&gpus));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int nccl_version = 0;
  CHECK_NCCL(ncclGetVersion(&nccl_version));
  std::printf("# nccl_anchor: %d x %s, NCCL %d, median of %d\n", gpus,
              prop.name, nccl_version, absl::GetFlag(FLAGS_iters));
  std::vector<ncclComm_t> comms(gpus);
  CHECK_NCCL(ncclCommInitAll(comms.data(), gpus, nullptr));
  std::vector<cudaStream_t> streams(gpus);
  for (int g = 0; g < gpus; ++g) {
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaStreamCreate(&streams[g]));
  }
  std::printf("%14s %12s %10s %12s %10s %12s %10s %10s %10s %11s %10s\n",
              "bytes", "allgather_ms", "GB/s", "d2h_page_ms", "GB/s",
              "d2h_pin_ms", "GB/s", "d2d_ms", "GB/s", "peer_ms", "GB/s");
  const int iters = absl::GetFlag(FLAGS_iters);
  for (const std::string& text : absl::GetFlag(FLAGS_bytes)) {
    const size_t bytes = std::strtoull(text.c_str(), nullptr, 10);
    const size_t per_rank = bytes / gpus;
    std::vector<void*> buffers(gpus);
    for (int g = 0; g < gpus; ++g) {
      CHECK_CUDA(cudaSetDevice(g));
      CHECK_CUDA(cudaMalloc(&buffers[g], per_rank * gpus));
      CHECK_CUDA(cudaMemset(buffers[g], g + 1, per_rank * gpus));
    }
    const double gather = MedianSeconds(iters, [&] {
      CHECK_NCCL(ncclGroupStart());
      for (int g = 0; g < gpus; ++g) {
        uint8_t* base = static_cast<uint8_t*>(buffers[g]);
        CHECK_NCCL(ncclAllGather(base + g * per_rank, base, per_rank,
                                 ncclUint8, comms[g], streams[g]));
      }
      CHECK_NCCL(ncclGroupEnd());
      for (int g = 0; g < gpus; ++g) {
        CHECK_CUDA(cudaStreamSynchronize(streams[g]));
      }
    });
    std::vector<uint8_t> pageable(bytes, 1);  // Touched: warm pages.
    void* pinned = nullptr;
    CHECK_CUDA(cudaMallocHost(&pinned, bytes));
    std::memset(pinned, 1, bytes);
    CHECK_CUDA(cudaSetDevice(0));
    const double d2h_pageable = MedianSeconds(iters, [&] {
      CHECK_CUDA(cudaMemcpy(pageable.data(), buffers[0], per_rank * gpus,
                            cudaMemcpyDeviceToHost));
    });
    const double d2h_pinned = MedianSeconds(iters, [&] {
      CHECK_CUDA(cudaMemcpy(pinned, buffers[0], per_rank * gpus,
                            cudaMemcpyDeviceToHost));
    });
    void* copy = nullptr;
    CHECK_CUDA(cudaMalloc(&copy, per_rank * gpus));
    const double d2d = MedianSeconds(iters, [&] {
      CHECK_CUDA(cudaMemcpy(copy, buffers[0], per_rank * gpus,
                            cudaMemcpyDeviceToDevice));
    });
    // NaN with one GPU: there is no peer.
    const double peer = gpus < 2 ? std::nan("") : MedianSeconds(iters, [&] {
      CHECK_CUDA(cudaMemcpyPeer(copy, 0, buffers[1], 1, per_rank * gpus));
    });
    const double gb = static_cast<double>(per_rank * gpus) / 1e9;
    std::printf(
        "%14zu %12.3f %10.2f %12.3f %10.2f %12.3f %10.2f %10.3f %10.2f %11.3f "
        "%10.2f\n",
        per_rank * gpus, gather * 1e3, gb / gather, d2h_pageable * 1e3,
        gb / d2h_pageable, d2h_pinned * 1e3, gb / d2h_pinned, d2d * 1e3,
        gb / d2d, peer * 1e3, gb / peer);
    CHECK_CUDA(cudaFree(copy));
    CHECK_CUDA(cudaFreeHost(pinned));
    for (int g = 0; g < gpus; ++g) {
      CHECK_CUDA(cudaSetDevice(g));
      CHECK_CUDA(cudaFree(buffers[g]));
    }
  }
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  return 0;
}
