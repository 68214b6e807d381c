#ifndef SUMMON_SERVER_GPU_CUDA_SHARD_MEMORY_H_
#define SUMMON_SERVER_GPU_CUDA_SHARD_MEMORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/shard_memory.h"

namespace summon::server::gpu {

// Device placement for the shard store (`summond --device cuda`): each
// segment's bytes in one cudaMalloc allocation on the GPU of its rank, local
// rank i on device i modulo the visible device count (one local rank per
// GPU is the intended shape; more share a GPU, which tests on one GPU use).
class CudaShardMemoryProvider final : public ShardMemoryProvider {
 public:
  // UNAVAILABLE without a CUDA device (the runtime's reason in the message).
  static absl::StatusOr<std::unique_ptr<CudaShardMemoryProvider>> Create();

  absl::StatusOr<std::unique_ptr<ShardMemory>> Allocate(
      int local_index, int64_t bytes) const override;
  std::string name() const override { return "cuda"; }
  int device_count() const { return device_count_; }

 private:
  explicit CudaShardMemoryProvider(int device_count)
      : device_count_(device_count) {}

  const int device_count_;
};

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_CUDA_SHARD_MEMORY_H_
