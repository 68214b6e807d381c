#include "server/gpu/cuda_slice_destinations.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/gpu/cuda_status.h"
#include "server/gpu/device_buffer.h"

namespace summon::server::gpu {
namespace {

static_assert(kCudaIpcHandleBytes == kIpcHandleBytes);

class CudaSliceDestination final : public SliceDestination {
 public:
  CudaSliceDestination(std::unique_ptr<IpcMappedBuffer> mapped, int device,
                       int64_t offset, int64_t capacity)
      : mapped_(std::move(mapped)),
        device_(device),
        offset_(offset),
        capacity_(capacity) {}

  absl::Status Write(int64_t at, const uint8_t* data, int64_t bytes) override {
    if (at < 0 || bytes < 0 || at > capacity_ || bytes > capacity_ - at) {
      return absl::InternalError(absl::StrCat(
          "bytes [", at, ", ", at + bytes, ") of the answer are outside the ",
          "CUDA buffer's ", capacity_));
    }
    return CopyToDevice(device_,
                        static_cast<uint8_t*>(mapped_->data()) + offset_ + at,
                        data, bytes);
  }

 private:
  const std::unique_ptr<IpcMappedBuffer> mapped_;
  const int device_;
  const int64_t offset_;
  const int64_t capacity_;
};

// The bytes of the allocation from `mapped` on (the handle names a whole
// cudaMalloc block, mapped at its start), through the driver's
// cuMemGetAddressRange; -1 when the driver does not say.
int64_t AllocationBytesFrom(const void* mapped) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &entry, 12000,
                                       cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || entry == nullptr) {
    return -1;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto get_range =
      reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(entry);
  const auto at = reinterpret_cast<CUdeviceptr>(mapped);
  if (get_range(&base, &size, at) != CUDA_SUCCESS) return -1;
  return static_cast<int64_t>(base + size - at);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SliceDestination>> CudaSliceDestinations::Open(
    const CudaIpcTarget& target) {
  int count = 0;
  if (absl::Status counted =
          FromCudaError(cudaGetDeviceCount(&count), "counting CUDA devices");
      !counted.ok()) {
    return NoCudaDevice(target.device, counted.message());
  }
  if (target.device >= count) {
    return NoCudaDevice(target.device,
                        absl::StrCat(count, " CUDA device(s) visible"));
  }
  absl::StatusOr<std::unique_ptr<IpcMappedBuffer>> mapped =
      IpcMappedBuffer::Open(target.device, target.ipc_handle);
  if (!mapped.ok()) {
    return absl::Status(
        mapped.status().code(),
        absl::StrCat("cuda_buffer: device ", target.device,
                     ": opening the IPC handle: ", mapped.status().message()));
  }
  // The caller states the capacity; the driver knows the allocation's end.
  // Writing past it would fault the daemon's CUDA context, so refuse.
  const int64_t allocation = AllocationBytesFrom((*mapped)->data());
  if (allocation >= 0 && (target.offset > allocation ||
                          target.bytes > allocation - target.offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_buffer: bytes [", target.offset, ", ",
                     target.offset + target.bytes,
                     ") pass the end of the shared CUDA "
                     "allocation, which has ",
                     allocation, " bytes"));
  }
  return std::make_unique<CudaSliceDestination>(
      *std::move(mapped), target.device, target.offset, target.bytes);
}

}  // namespace summon::server::gpu
