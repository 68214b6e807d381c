#ifndef SUMMON_CLIENT_LIB_WIRE_DTYPE_H_
#define SUMMON_CLIENT_LIB_WIRE_DTYPE_H_

#include <cstddef>
#include <optional>

#include "core/dtype.h"
#include "summon/v1/types.pb.h"

namespace summon::client {

// Between the wire's summon.v1.DType and core's DType. DTYPE_UNSPECIFIED
// and unknown enum values have no core dtype.
std::optional<core::DType> CoreDType(v1::DType dtype);
v1::DType WireDType(core::DType dtype);

// Bytes per element; 0 for a value without a core dtype.
size_t ElementSize(v1::DType dtype);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_WIRE_DTYPE_H_
