#include "server/gpu/cuda_status.h"

#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace summon::server::gpu {

absl::Status FromCudaError(int error, absl::string_view what) {
  const auto code = static_cast<cudaError_t>(error);
  if (code == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorString(code));
  switch (code) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace summon::server::gpu
