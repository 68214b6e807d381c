#include "server/gpu/cuda_shard_memory.h"

#include <cuda_runtime.h>

#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "server/gpu/cuda_status.h"
#include "server/gpu/device_buffer.h"

namespace summon::server::gpu {
namespace {

class CudaShardMemory final : public ShardMemory {
 public:
  explicit CudaShardMemory(std::unique_ptr<DeviceBuffer> buffer)
      : buffer_(std::move(buffer)) {}

  int64_t size() const override { return buffer_->size(); }
  uint8_t* host() const override { return nullptr; }
  int device() const override { return buffer_->device(); }
  absl::Status Read(int64_t offset, void* to, int64_t bytes) const override {
    return buffer_->CopyToHost(offset, to, bytes);
  }
  absl::Status Write(int64_t offset, const void* from,
                     int64_t bytes) override {
    return buffer_->CopyFromHost(offset, from, bytes);
  }
  absl::Status CopyFrom(const ShardMemory& from, int64_t offset,
                        int64_t bytes) override {
    const auto* source = dynamic_cast<const CudaShardMemory*>(&from);
    if (source == nullptr || source->device() != device()) {
      return absl::InvalidArgumentError(
          "device shard memory copies only from shard memory on its GPU");
    }
    for (int64_t size : {size(), source->size()}) {
      if (absl::Status status = CheckShardRange(offset, bytes, size);
          !status.ok()) {
        return status;
      }
    }
    if (bytes == 0) return absl::OkStatus();
    return CopyOnDevice(device(), static_cast<uint8_t*>(data()) + offset,
                        static_cast<const uint8_t*>(source->data()) + offset,
                        bytes);
  }
  absl::StatusOr<std::string> IpcHandle() const override {
    return buffer_->IpcHandle();
  }

 private:
  void* data() const { return buffer_->data(); }

  const std::unique_ptr<DeviceBuffer> buffer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaShardMemoryProvider>>
CudaShardMemoryProvider::Create() {
  int count = 0;
  if (absl::Status status =
          FromCudaError(cudaGetDeviceCount(&count), "counting CUDA devices");
      !status.ok()) {
    return status;
  }
  if (count <= 0) {
    return absl::UnavailableError("no CUDA device is visible");
  }
  return absl::WrapUnique(new CudaShardMemoryProvider(count));
}

absl::StatusOr<std::unique_ptr<ShardMemory>> CudaShardMemoryProvider::Allocate(
    int local_index, int64_t bytes) const {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(local_index % device_count_, bytes);
  if (!buffer.ok()) return buffer.status();
  return std::make_unique<CudaShardMemory>(*std::move(buffer));
}

}  // namespace summon::server::gpu
