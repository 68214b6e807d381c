#include "server/gpu/device_buffer.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "server/gpu/cuda_status.h"

namespace summon::server::gpu {
namespace {

absl::Status CheckRange(int64_t offset, int64_t bytes, int64_t size) {
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("bytes [", offset, ", ", offset + bytes,
                     ") are outside the buffer of ", size, " bytes"));
  }
  return absl::OkStatus();
}

// cudaMemcpy on `device`. Copies into device memory (from the device, and
// from pageable host memory past its staging) may return before they
// finish, but callers count on the bytes being there when the call returns:
// another process may read them through CUDA IPC next (a session copy
// handed out, a committed shard), so those wait for the device. A copy to
// pageable host memory returns complete.
absl::Status Memcpy(int device, void* to, const void* from, int64_t bytes,
                    cudaMemcpyKind kind, const char* what) {
  if (absl::Status set = FromCudaError(cudaSetDevice(device), "cudaSetDevice");
      !set.ok()) {
    return set;
  }
  if (absl::Status copied = FromCudaError(
          cudaMemcpy(to, from, static_cast<size_t>(bytes), kind), what);
      !copied.ok() || kind == cudaMemcpyDeviceToHost) {
    return copied;
  }
  return FromCudaError(cudaDeviceSynchronize(), what);
}

}  // namespace

absl::Status CopyToDevice(int device, void* device_ptr, const void* host,
                          int64_t bytes) {
  return Memcpy(device, device_ptr, host, bytes, cudaMemcpyHostToDevice,
                "copy to the device");
}

absl::Status CopyFromDevice(int device, const void* device_ptr, void* host,
                            int64_t bytes) {
  return Memcpy(device, host, device_ptr, bytes, cudaMemcpyDeviceToHost,
                "copy from the device");
}

absl::Status CopyOnDevice(int device, void* to, const void* from,
                          int64_t bytes) {
  return Memcpy(device, to, from, bytes, cudaMemcpyDeviceToDevice,
                "copy on the device");
}

absl::Status CopyBetweenDevices(int to_device, void* to, int from_device,
                                const void* from, int64_t bytes) {
  if (to_device == from_device) return CopyOnDevice(to_device, to, from, bytes);
  if (absl::Status copied =
          FromCudaError(cudaMemcpyPeer(to, to_device, from, from_device,
                                       static_cast<size_t>(bytes)),
                        "copy between devices");
      !copied.ok()) {
    return copied;
  }
  // Serialized with both devices' work: waiting for both sees it done.
  for (int device : {from_device, to_device}) {
    if (absl::Status done =
            FromCudaError(cudaSetDevice(device), "cudaSetDevice");
        !done.ok()) {
      return done;
    }
    if (absl::Status done =
            FromCudaError(cudaDeviceSynchronize(), "copy between devices");
        !done.ok()) {
      return done;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(
    int device, int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device buffer needs a positive size, got ", bytes));
  }
  if (absl::Status set = FromCudaError(cudaSetDevice(device),
                                       absl::StrCat("CUDA device ", device));
      !set.ok()) {
    return set;
  }
  void* data = nullptr;
  if (absl::Status allocated =
          FromCudaError(cudaMalloc(&data, static_cast<size_t>(bytes)),
                        absl::StrCat("cudaMalloc of ", bytes, " bytes"));
      !allocated.ok()) {
    return allocated;
  }
  // Shards start as zeros, as shared-memory segments do.
  if (absl::Status zeroed = FromCudaError(
          cudaMemset(data, 0, static_cast<size_t>(bytes)), "cudaMemset");
      !zeroed.ok()) {
    cudaFree(data);
    return zeroed;
  }
  return absl::WrapUnique(new DeviceBuffer(device, data, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

absl::Status DeviceBuffer::CopyFromHost(int64_t offset, const void* host,
                                        int64_t bytes) {
  if (absl::Status range = CheckRange(offset, bytes, size_); !range.ok()) {
    return range;
  }
  return CopyToDevice(device_, static_cast<char*>(data_) + offset, host, bytes);
}

absl::Status DeviceBuffer::CopyToHost(int64_t offset, void* host,
                                      int64_t bytes) const {
  if (absl::Status range = CheckRange(offset, bytes, size_); !range.ok()) {
    return range;
  }
  return CopyFromDevice(device_, static_cast<const char*>(data_) + offset, host,
                        bytes);
}

absl::StatusOr<std::string> DeviceBuffer::IpcHandle() const {
  static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
  cudaIpcMemHandle_t handle;
  if (absl::Status set = FromCudaError(cudaSetDevice(device_), "cudaSetDevice");
      !set.ok()) {
    return set;
  }
  if (absl::Status got = FromCudaError(cudaIpcGetMemHandle(&handle, data_),
                                       "cudaIpcGetMemHandle");
      !got.ok()) {
    return got;
  }
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

absl::StatusOr<std::unique_ptr<IpcMappedBuffer>> IpcMappedBuffer::Open(
    int device, absl::string_view handle_bytes) {
  if (handle_bytes.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA IPC handle has ", kIpcHandleBytes, " bytes, got ",
                     handle_bytes.size()));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, handle_bytes.data(), sizeof(handle));
  if (absl::Status set = FromCudaError(cudaSetDevice(device), "cudaSetDevice");
      !set.ok()) {
    return set;
  }
  void* data = nullptr;
  if (absl::Status opened = FromCudaError(
          cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
      !opened.ok()) {
    // Whatever CUDA said, the handle could not be opened here.
    return absl::UnavailableError(opened.message());
  }
  return absl::WrapUnique(new IpcMappedBuffer(device, data));
}

IpcMappedBuffer::~IpcMappedBuffer() {
  cudaSetDevice(device_);
  cudaIpcCloseMemHandle(data_);
}

}  // namespace summon::server::gpu
