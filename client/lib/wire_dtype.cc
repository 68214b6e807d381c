#include "client/lib/wire_dtype.h"

namespace summon::client {
namespace {

struct DTypePair {
  v1::DType wire;
  core::DType core;
};
constexpr DTypePair kDTypes[] = {
    {v1::DTYPE_FLOAT32, core::DType::kFloat32},
    {v1::DTYPE_FLOAT64, core::DType::kFloat64},
    {v1::DTYPE_FLOAT16, core::DType::kFloat16},
    {v1::DTYPE_BFLOAT16, core::DType::kBFloat16},
    {v1::DTYPE_INT8, core::DType::kInt8},
    {v1::DTYPE_UINT8, core::DType::kUInt8},
    {v1::DTYPE_INT16, core::DType::kInt16},
    {v1::DTYPE_INT32, core::DType::kInt32},
    {v1::DTYPE_INT64, core::DType::kInt64},
    {v1::DTYPE_BOOL, core::DType::kBool},
};

}  // namespace

std::optional<core::DType> CoreDType(v1::DType dtype) {
  for (const DTypePair& pair : kDTypes) {
    if (pair.wire == dtype) return pair.core;
  }
  return std::nullopt;
}

v1::DType WireDType(core::DType dtype) {
  for (const DTypePair& pair : kDTypes) {
    if (pair.core == dtype) return pair.wire;
  }
  return v1::DTYPE_UNSPECIFIED;
}

size_t ElementSize(v1::DType dtype) {
  const std::optional<core::DType> core_dtype = CoreDType(dtype);
  return core_dtype ? core::ElementSize(*core_dtype) : 0;
}

}  // namespace summon::client
