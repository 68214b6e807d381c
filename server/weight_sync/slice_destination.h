#ifndef SUMMON_SERVER_WEIGHT_SYNC_SLICE_DESTINATION_H_
#define SUMMON_SERVER_WEIGHT_SYNC_SLICE_DESTINATION_H_

// Where a ReadSlices answer is written instead of data messages
// (weight_sync.proto, ReadSlicesRequest.cuda_buffer): the seam between the
// read, which assembles the packed answer in host windows
// (WeightSync::Deliver), and the memory it lands in. summond's is a CUDA
// IPC buffer of the caller's (server/gpu/cuda_slice_destinations.h); the
// tests' writes into host memory (server/testing/fake_slice_destinations.h).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::server {

// One answer's destination, opened for it and closed after.
class SliceDestination {
 public:
  virtual ~SliceDestination() = default;
  // Bytes [at, at + bytes) of the packed answer, whole when it returns (the
  // caller may read them as soon as the call ends).
  virtual absl::Status Write(int64_t at, const uint8_t* data,
                             int64_t bytes) = 0;
};

// sizeof(cudaIpcMemHandle_t) (server/gpu/device_buffer.h's kIpcHandleBytes,
// which this room cannot see: the GPU code sits above it).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// A caller's CUDA allocation, as ReadSlicesRequest.cuda_buffer names it.
struct CudaIpcTarget {
  int device = 0;
  std::string ipc_handle;  // cudaIpcMemHandle_t's 64 bytes.
  int64_t offset = 0;      // Where the answer starts in the allocation.
  int64_t bytes = 0;       // The capacity from `offset`.
};

// Opens CUDA IPC targets. FAILED_PRECONDITION (NoCudaDevice) when there is
// no device `target.device`; INVALID_ARGUMENT when offset + bytes passes
// the allocation's end; UNAVAILABLE when the handle cannot be opened.
class DeviceSliceDestinations {
 public:
  virtual ~DeviceSliceDestinations() = default;
  virtual absl::StatusOr<std::unique_ptr<SliceDestination>> Open(
      const CudaIpcTarget& target) = 0;
};

// The refusals a client answers by reading through local_buffer or the
// stream instead (FAILED_PRECONDITION, "cuda_buffer: ..."): no CUDA device
// `device` on this host (`why`: what CUDA said), and CUDA delivery not
// served at all or not to this caller (`why`).
absl::Status NoCudaDevice(int device, absl::string_view why);
absl::Status NoCudaDelivery(absl::string_view why);

// OK when a packed answer of `total_bytes` (entry i at header_bytes +
// offsets[i], bytes[i] long) fits `size` bytes of `what` ("the slice
// buffer"); else INVALID_ARGUMENT naming the first entry (names[i]) that
// does not fit.
absl::Status CheckSlicesFit(absl::string_view what, int64_t header_bytes,
                            int64_t size, int64_t total_bytes,
                            const std::vector<std::string>& names,
                            const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& bytes);

// `target` checked (its handle's size, offset and capacity, the answer
// fitting it) and opened through `devices` (null: NoCudaDelivery). Nothing
// is written.
absl::StatusOr<std::unique_ptr<SliceDestination>> OpenCudaTarget(
    DeviceSliceDestinations* devices, const CudaIpcTarget& target,
    int64_t total_bytes, const std::vector<std::string>& names,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes);

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_SLICE_DESTINATION_H_
