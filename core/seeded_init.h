#ifndef SUMMON_CORE_SEEDED_INIT_H_
#define SUMMON_CORE_SEEDED_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace summon::core {

// Seeded init (`--init seeded:S`, docs/design.md#seeded-init): every element
// of every parameter is a pure function of (FQN, seed, row-major index), so
// anyone can check gathered values without a reference copy and each rank
// computes just the slice it owns.

// 64-bit FNV-1a of the bytes of `data`.
uint64_t Fnv1a64(absl::string_view data);

// One SplitMix64 step on `state`; the golden-ratio increment is part of it.
uint64_t SplitMix64(uint64_t state);

// x = fnv1a64(fqn) XOR (seed * 0x9E3779B97F4A7C15): the stream of one
// parameter under one seed.
uint64_t SeededStreamKey(absl::string_view fqn, uint64_t seed);

// The value of element `index` (row-major) of parameter `fqn`: a multiple of
// 2^-24 in [-0.5, 0.5), so float32 and float64 hold it exactly.
double SeededValue(absl::string_view fqn, uint64_t seed, int64_t index);

// Writes elements [first_element, first_element + count) of parameter `fqn`
// to `out` as `dtype`; float16 and bfloat16 round the float32 value to
// nearest even. INVALID_ARGUMENT for a non-floating dtype (R14: such a
// parameter cannot exist) or a negative range.
absl::Status FillSeeded(absl::string_view fqn, uint64_t seed, DType dtype,
                        int64_t first_element, int64_t count, void* out);

}  // namespace summon::core

#endif  // SUMMON_CORE_SEEDED_INIT_H_
