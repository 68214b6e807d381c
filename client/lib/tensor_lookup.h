#ifndef SUMMON_CLIENT_LIB_TENSOR_LOOKUP_H_
#define SUMMON_CLIENT_LIB_TENSOR_LOOKUP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/lib/summon_client.h"

namespace summon::client {

// The rule of a whole-tensor write (WriteTensorParams): INVALID_ARGUMENT,
// naming both shapes, unless the data of `element_count` elements (and
// `params.shape`, when given) has exactly `tensor`'s shape.
absl::Status CheckWholeWrite(const v1::TensorInfo& tensor,
                             const WriteTensorParams& params,
                             int64_t element_count);

// "[48, 16]".
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_TENSOR_LOOKUP_H_
