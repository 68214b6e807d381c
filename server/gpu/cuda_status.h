#ifndef SUMMON_SERVER_GPU_CUDA_STATUS_H_
#define SUMMON_SERVER_GPU_CUDA_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace summon::server::gpu {

// A cudaError_t (as its int value) as an absl::Status naming `what` and the
// runtime's text: RESOURCE_EXHAUSTED when device or pinned memory ran out,
// INVALID_ARGUMENT for a bad value or device, UNAVAILABLE otherwise (no
// driver, no device, a failed copy).
absl::Status FromCudaError(int error, absl::string_view what);

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_CUDA_STATUS_H_
