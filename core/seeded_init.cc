#include "core/seeded_init.h"

#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kFnvOffsetBasis = 0xCBF29CE484222325ULL;
constexpr uint64_t kFnvPrime = 0x00000100000001B3ULL;

// Element `index` of the stream `key`: the top 24 bits of splitmix64(key + i)
// as a fraction of 2^24, centred on zero.
double StreamValue(uint64_t key, int64_t index) {
  const uint64_t z = SplitMix64(key + static_cast<uint64_t>(index));
  return static_cast<double>(z >> 40) / static_cast<double>(1 << 24) - 0.5;
}

}  // namespace

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = kFnvOffsetBasis;
  for (char c : data) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t SplitMix64(uint64_t state) {
  state += kGoldenGamma;
  state = (state ^ (state >> 30)) * 0xBF58476D1CE4E5B9ULL;
  state = (state ^ (state >> 27)) * 0x94D049BB133111EBULL;
  return state ^ (state >> 31);
}

uint64_t SeededStreamKey(absl::string_view fqn, uint64_t seed) {
  return Fnv1a64(fqn) ^ (seed * kGoldenGamma);
}

double SeededValue(absl::string_view fqn, uint64_t seed, int64_t index) {
  return StreamValue(SeededStreamKey(fqn, seed), index);
}

absl::Status FillSeeded(absl::string_view fqn, uint64_t seed, DType dtype,
                        int64_t first_element, int64_t count, void* out) {
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("seeded init of '", fqn, "': dtype ", DTypeName(dtype),
                     " is not a floating-point type"));
  }
  if (first_element < 0 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seeded init of '", fqn, "': invalid element range [",
                     first_element, ", +", count, ")"));
  }
  const uint64_t key = SeededStreamKey(fqn, seed);
  for (int64_t i = 0; i < count; ++i) {
    const double value = StreamValue(key, first_element + i);
    switch (dtype) {
      case DType::kFloat64:
        static_cast<double*>(out)[i] = value;
        break;
      case DType::kFloat32:
        static_cast<float*>(out)[i] = static_cast<float>(value);
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(out)[i] = FloatToHalf(static_cast<float>(value));
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(out)[i] =
            FloatToBFloat16(static_cast<float>(value));
        break;
      default:
        break;  // Refused above.
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::core
