#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::core {
namespace {

struct DTypeNames {
  DType dtype;
  absl::string_view name;
  absl::string_view safetensors_name;
  size_t size;
  bool floating;
};

constexpr DTypeNames kDTypes[] = {
    {DType::kFloat32, "float32", "F32", 4, true},
    {DType::kFloat64, "float64", "F64", 8, true},
    {DType::kFloat16, "float16", "F16", 2, true},
    {DType::kBFloat16, "bfloat16", "BF16", 2, true},
    {DType::kInt8, "int8", "I8", 1, false},
    {DType::kUInt8, "uint8", "U8", 1, false},
    {DType::kInt16, "int16", "I16", 2, false},
    {DType::kInt32, "int32", "I32", 4, false},
    {DType::kInt64, "int64", "I64", 8, false},
    {DType::kBool, "bool", "BOOL", 1, false},
};

const DTypeNames& Names(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // Unreachable: every enumerator is listed above.
}

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

double ReadAsDouble(DType dtype, const void* src, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(src)[i];
    case DType::kFloat64:
      return static_cast<const double*>(src)[i];
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(src)[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    default:
      return 0;
  }
}

void WriteFromDouble(DType dtype, double value, void* dst, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(dst)[i] = static_cast<float>(value);
      break;
    case DType::kFloat64:
      static_cast<double*>(dst)[i] = value;
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(dst)[i] = FloatToHalf(static_cast<float>(value));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(dst)[i] =
          FloatToBFloat16(static_cast<float>(value));
      break;
    default:
      break;
  }
}

}  // namespace

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const auto& entry : kDTypes) {
    if (name == entry.name || name == entry.safetensors_name) {
      return entry.dtype;
    }
  }
  std::vector<absl::string_view> known;
  for (const auto& entry : kDTypes) known.push_back(entry.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "' (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::string_view DTypeName(DType dtype) { return Names(dtype).name; }

absl::string_view SafetensorsDTypeName(DType dtype) {
  return Names(dtype).safetensors_name;
}

size_t ElementSize(DType dtype) { return Names(dtype).size; }

bool IsFloatingPoint(DType dtype) { return Names(dtype).floating; }

absl::Status CheckFlattenable(absl::string_view fqn, DType dtype) {
  if (IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", fqn, "' has dtype ", DTypeName(dtype),
                   ": only floating-point parameters can be flattened into a "
                   "unit (R14)"));
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits = FloatBits(value);
  if (std::isnan(value)) {
    // Keep it a quiet NaN; plain truncation could turn it into infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  }
  const uint32_t lsb = (bits >> 16) & 1;
  bits += 0x7FFF + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits >= 0x7F800000) {  // Inf or NaN.
    const bool is_nan = abs_bits > 0x7F800000;
    return static_cast<uint16_t>(sign | 0x7C00 | (is_nan ? 0x0200 : 0));
  }
  if (abs_bits >= 0x477FF000) {  // Rounds to >= 65520: overflow to infinity.
    return static_cast<uint16_t>(sign | 0x7C00);
  }
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  uint32_t mantissa = abs_bits & 0x7FFFFF;
  if (exponent < -25) return sign;  // Below half the smallest subnormal.
  int shift;
  uint32_t half_exponent;
  if (exponent < -14) {
    // Subnormal half: value = m * 2^-24 with the implicit bit made explicit.
    mantissa |= 0x800000;
    // Subnormal unit is 2^-24 and the 24-bit mantissa holds 2^(exponent-23).
    shift = -exponent - 1;
    half_exponent = 0;
  } else {
    shift = 13;
    half_exponent = static_cast<uint32_t>(exponent + 15);
  }
  uint32_t kept = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (kept & 1))) ++kept;
  // A carry out of the mantissa moves into the exponent, which is exactly the
  // right result (including subnormal -> smallest normal).
  const uint32_t result = (half_exponent << 10) + kept;
  return static_cast<uint16_t>(sign | result);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) {
    return BitsToFloat(sign | 0x7F800000 | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

absl::Status ConvertElements(DType from, const void* src, DType to, void* dst,
                             int64_t count) {
  if (!IsFloatingPoint(from) || !IsFloatingPoint(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot convert ", DTypeName(from), " to ", DTypeName(to),
                     ": only floating-point conversions are supported"));
  }
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(count) * ElementSize(from));
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < count; ++i) {
    // float32 -> float16/bfloat16 must round once, from the float32 value; a
    // double carries every float32 value exactly, so going through double
    // does not double-round.
    WriteFromDouble(to, ReadAsDouble(from, src, i), dst, i);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  int64_t total = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeToString(shape), " has a negative dimension"));
    }
    if (dim != 0 && total > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " overflows int64"));
    }
    total *= dim;
  }
  return total;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace summon::core
