#ifndef SUMMON_CORE_DTYPE_H_
#define SUMMON_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace summon::core {

// Element types a parameter may declare. Only the floating-point ones can be
// flattened into a unit (rule R14); the others exist so that a layout naming
// them is parsed and then refused with a precise message instead of "unknown".
enum class DType {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
};

// Lower-case names as used by the layout file and safetensors ("float32",
// "bfloat16", ...). Safetensors' short names (F32, BF16, ...) are accepted too.
absl::StatusOr<DType> ParseDType(absl::string_view name);
absl::string_view DTypeName(DType dtype);
// The safetensors spelling (F32, F64, F16, BF16, I8, U8, I16, I32, I64, BOOL).
absl::string_view SafetensorsDTypeName(DType dtype);
size_t ElementSize(DType dtype);
bool IsFloatingPoint(DType dtype);

// R14: integer and bool parameters cannot live in a flat parameter.
absl::Status CheckFlattenable(absl::string_view fqn, DType dtype);

// Conversions used for seeded init and read_dtype; both round to nearest even.
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);

// Converts `count` elements between floating dtypes (any pair of kFloat32,
// kFloat64, kFloat16, kBFloat16). Narrowing rounds to nearest even.
absl::Status ConvertElements(DType from, const void* src, DType to, void* dst,
                             int64_t count);

using Shape = std::vector<int64_t>;

// Product of the dimensions; INVALID_ARGUMENT for a negative dimension or a
// product that overflows int64. The empty shape is a scalar (1 element).
absl::StatusOr<int64_t> NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

}  // namespace summon::core

#endif  // SUMMON_CORE_DTYPE_H_
