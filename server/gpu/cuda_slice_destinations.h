#ifndef SUMMON_SERVER_GPU_CUDA_SLICE_DESTINATIONS_H_
#define SUMMON_SERVER_GPU_CUDA_SLICE_DESTINATIONS_H_

// ReadSlices into a caller's GPU memory (weight_sync.proto, cuda_buffer):
// the caller's allocation opened through its CUDA IPC handle
// (IpcMappedBuffer), each window of the packed answer copied host to
// device (CopyToDevice, whole on return). summond serves it whatever its
// --device: the memory written is the caller's, not the shards'.

#include <memory>

#include "server/weight_sync/slice_destination.h"

namespace summon::server::gpu {

class CudaSliceDestinations final : public DeviceSliceDestinations {
 public:
  // FAILED_PRECONDITION (NoCudaDevice) without CUDA device target.device
  // (no GPU, no driver); INVALID_ARGUMENT when offset + bytes passes the
  // end of the allocation the handle names; UNAVAILABLE when CUDA cannot
  // open the handle (freed, another host's, this process's own).
  absl::StatusOr<std::unique_ptr<SliceDestination>> Open(
      const CudaIpcTarget& target) override;
};

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_CUDA_SLICE_DESTINATIONS_H_
