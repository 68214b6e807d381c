#include "server/weight_sync/slice_destination.h"

#include "absl/strings/str_cat.h"

namespace summon::server {

absl::Status NoCudaDevice(int device, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "cuda_buffer: no CUDA device ", device, " on the daemon's host (", why,
      "); read through local_buffer or the stream instead"));
}

absl::Status NoCudaDelivery(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("cuda_buffer: ", why,
                   "; read through local_buffer or the stream instead"));
}

absl::Status CheckSlicesFit(absl::string_view what, int64_t header_bytes,
                            int64_t size, int64_t total_bytes,
                            const std::vector<std::string>& names,
                            const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& bytes) {
  const int64_t needed = header_bytes + total_bytes;
  if (size >= needed) return absl::OkStatus();
  const std::string parts = header_bytes > 0
                                ? absl::StrCat("a ", header_bytes,
                                               "-byte header and the packed "
                                               "entries")
                                : "the packed entries";
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int64_t end = header_bytes + offsets[i] + bytes[i];
    if (end > size) {
      return absl::InvalidArgumentError(absl::StrCat(
          names[i], ": ends at byte ", end, " of ", what, ", which has ", size,
          " bytes (the answer needs ", needed, ": ", parts, ")"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has ", size, " bytes; the answer needs ", needed));
}

absl::StatusOr<std::unique_ptr<SliceDestination>> OpenCudaTarget(
    DeviceSliceDestinations* devices, const CudaIpcTarget& target,
    int64_t total_bytes, const std::vector<std::string>& names,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes) {
  if (target.ipc_handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_buffer.ipc_handle has ", target.ipc_handle.size(),
                     " bytes; a CUDA IPC handle (cudaIpcMemHandle_t) has ",
                     kCudaIpcHandleBytes));
  }
  if (target.offset < 0 || target.bytes < 0 || target.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_buffer: device ", target.device, ", offset ", target.offset,
        " and bytes ", target.bytes, " must not be negative"));
  }
  if (absl::Status fits = CheckSlicesFit("the CUDA buffer", 0, target.bytes,
                                         total_bytes, names, offsets, bytes);
      !fits.ok()) {
    return fits;
  }
  if (devices == nullptr) {
    return NoCudaDelivery("this daemon does not deliver into CUDA buffers");
  }
  return devices->Open(target);
}

}  // namespace summon::server
