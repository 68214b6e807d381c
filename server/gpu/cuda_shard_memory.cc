#include "server/gpu/cuda_shard_memory.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "server/gpu/cuda_status.h"
#include "server/gpu/device_buffer.h"
#include "server/gpu/device_stats.h"
#include "server/gpu/device_watch.h"
#include "server/gpu/pinned_streamer.h"
#include "spdlog/spdlog.h"

namespace summon::server::gpu {
namespace {

class CudaShardMemory final : public ShardMemory {
 public:
  explicit CudaShardMemory(std::unique_ptr<DeviceBuffer> buffer)
      : buffer_(std::move(buffer)) {}

  int64_t size() const override { return buffer_->size(); }
  uint8_t* host() const override { return nullptr; }
  int device() const override { return buffer_->device(); }
  void* device_data() const override { return data(); }
  absl::Status Read(int64_t offset, void* to, int64_t bytes) const override {
    return buffer_->CopyToHost(offset, to, bytes);
  }
  absl::Status Write(int64_t offset, const void* from, int64_t bytes) override {
    return buffer_->CopyFromHost(offset, from, bytes);
  }
  absl::Status CopyRange(const ShardMemory& from, int64_t from_offset,
                         int64_t offset, int64_t bytes) override {
    const auto* source = dynamic_cast<const CudaShardMemory*>(&from);
    if (source == nullptr) {
      return absl::InvalidArgumentError(
          "device shard memory copies only from device shard memory");
    }
    if (absl::Status status =
            CheckCopyRanges(from, from_offset, *this, offset, bytes);
        !status.ok()) {
      return status;
    }
    if (bytes == 0) return absl::OkStatus();
    return CopyBetweenDevices(
        device(), static_cast<uint8_t*>(data()) + offset, source->device(),
        static_cast<const uint8_t*>(source->data()) + from_offset, bytes);
  }
  // Kernels on the GPU that holds the bytes; only the numbers come back.
  absl::StatusOr<core::TensorStatistics> Statistics(int64_t offset,
                                                    core::DType dtype,
                                                    int64_t numel,
                                                    int bins) const override {
    if (absl::Status status = CheckTensorRange(offset, dtype, numel, size());
        !status.ok()) {
      return status;
    }
    if (absl::Status set =
            FromCudaError(cudaSetDevice(device()), "cudaSetDevice");
        !set.ok()) {
      return set;
    }
    return ComputeDeviceTensorStatistics(
        dtype, static_cast<const uint8_t*>(data()) + offset, numel, bins);
  }
  // The watch kernels on the GPU that holds the bytes (device_watch.h).
  absl::Status AccumulateWatch(
      int64_t offset, core::DType dtype, int64_t numel,
      const std::optional<core::HistogramRange>& range,
      core::WatchPartial* partial) const override {
    if (absl::Status status = CheckTensorRange(offset, dtype, numel, size());
        !status.ok()) {
      return status;
    }
    static std::once_flag logged;
    std::call_once(logged, [] {
      spdlog::info(
          "watch statistics of device-placed shards: CUDA kernels on the "
          "shards' GPU");
    });
    if (absl::Status set =
            FromCudaError(cudaSetDevice(device()), "cudaSetDevice");
        !set.ok()) {
      return set;
    }
    return AccumulateDeviceWatchPartial(
        dtype, static_cast<const uint8_t*>(data()) + offset, numel, range,
        partial);
  }
  // Device to host through two pinned chunks (PinnedStreamer): the next
  // chunk copies while the sink (a gRPC stream) takes this one. The
  // allocation keeps one streamer for its reads; a read that finds it busy
  // pins a pair of its own for the call.
  absl::Status ReadChunks(int64_t offset, int64_t bytes, int64_t chunk_bytes,
                          const ChunkSink& sink) const override {
    if (absl::Status status =
            CheckChunkedRead(offset, bytes, chunk_bytes, size());
        !status.ok()) {
      return status;
    }
    if (bytes == 0) return absl::OkStatus();
    std::unique_lock<std::mutex> kept(streamer_mu_, std::try_to_lock);
    std::unique_ptr<PinnedStreamer> own;
    std::unique_ptr<PinnedStreamer>& streamer =
        kept.owns_lock() ? streamer_ : own;
    if (streamer == nullptr || streamer->chunk_bytes() != chunk_bytes) {
      absl::StatusOr<std::unique_ptr<PinnedStreamer>> created =
          PinnedStreamer::Create(device(), chunk_bytes);
      if (!created.ok()) return created.status();
      streamer = *std::move(created);
    }
    return streamer->Read(static_cast<const uint8_t*>(data()) + offset, bytes,
                          [&](const char* chunk, int64_t n) {
                            return sink(reinterpret_cast<const uint8_t*>(chunk),
                                        n);
                          });
  }
  absl::StatusOr<std::string> IpcHandle() const override {
    return buffer_->IpcHandle();
  }

 private:
  void* data() const { return buffer_->data(); }

  const std::unique_ptr<DeviceBuffer> buffer_;
  mutable std::mutex streamer_mu_;
  mutable std::unique_ptr<PinnedStreamer> streamer_;  // Under streamer_mu_.
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
