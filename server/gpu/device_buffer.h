#ifndef SUMMON_SERVER_GPU_DEVICE_BUFFER_H_
#define SUMMON_SERVER_GPU_DEVICE_BUFFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::server::gpu {

// Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t) as it travels in
// Trainer.MapShards.
inline constexpr size_t kIpcHandleBytes = 64;

// One allocation in a GPU's memory (cudaMalloc: never managed memory, which
// CUDA IPC cannot share), zero-filled, freed on destruction. The piece a
// device shard store is made of: a rank's params or grads of one model.
class DeviceBuffer {
 public:
  // UNAVAILABLE without a CUDA device; RESOURCE_EXHAUSTED when the GPU's
  // memory runs out; INVALID_ARGUMENT for a bad device or size.
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int device,
                                                                int64_t bytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  int64_t size() const { return size_; }
  int device() const { return device_; }

  // Host <-> device copies of [offset, offset + bytes); OUT_OF_RANGE beyond
  // the buffer.
  absl::Status CopyFromHost(int64_t offset, const void* host, int64_t bytes);
  absl::Status CopyToHost(int64_t offset, void* host, int64_t bytes) const;

  // The CUDA IPC handle another process opens with OpenIpcBuffer (or
  // torch/cupy's cudaIpcOpenMemHandle) to compute on these bytes in place.
  absl::StatusOr<std::string> IpcHandle() const;

 private:
  DeviceBuffer(int device, void* data, int64_t size)
      : device_(device), data_(data), size_(size) {}

  const int device_;
  void* const data_;
  const int64_t size_;
};

// Another process's DeviceBuffer opened through its IPC handle; closed on
// destruction (the memory stays the owner's).
class IpcMappedBuffer {
 public:
  // INVALID_ARGUMENT for a handle of the wrong size; UNAVAILABLE when CUDA
  // cannot open it (no device, a freed allocation, the same process).
  static absl::StatusOr<std::unique_ptr<IpcMappedBuffer>> Open(
      int device, absl::string_view handle);
  IpcMappedBuffer(const IpcMappedBuffer&) = delete;
  IpcMappedBuffer& operator=(const IpcMappedBuffer&) = delete;
  ~IpcMappedBuffer();

  void* data() const { return data_; }

 private:
  IpcMappedBuffer(int device, void* data) : device_(device), data_(data) {}

  const int device_;
  void* const data_;
};

// The device copy helpers both classes use, with the CUDA error named.
absl::Status CopyToDevice(int device, void* device_ptr, const void* host,
                          int64_t bytes);
absl::Status CopyFromDevice(int device, const void* device_ptr, void* host,
                            int64_t bytes);
// Device to device on one GPU (staging and commits of a device shard store).
absl::Status CopyOnDevice(int device, void* to, const void* from,
                          int64_t bytes);
// Between two GPUs of the node (cudaMemcpyPeer; CopyOnDevice when they are
// the same): a gather's local slices into a session copy on another GPU.
absl::Status CopyBetweenDevices(int to_device, void* to, int from_device,
                                const void* from, int64_t bytes);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_DEVICE_BUFFER_H_
