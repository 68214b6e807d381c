// Writes the seeded init of a float32 parameter, scaled by an integer factor,
// to stdout as raw little-endian float32 bytes: exactly the data section of
// the .npy that `summonctl tensor read` saves for it. summonctl_e2e_test.sh
// compares files against it byte for byte and builds its edit from it.
//
//   seeded_values FQN SEED COUNT FACTOR

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "core/seeded_init.h"

int main(int argc, char** argv) {
  uint64_t seed = 0;
  int64_t count = 0;
  int32_t factor = 0;
  if (argc != 5 || !absl::SimpleAtoi(argv[2], &seed) ||
      !absl::SimpleAtoi(argv[3], &count) || count < 0 ||
      !absl::SimpleAtoi(argv[4], &factor)) {
    std::cerr << "usage: seeded_values FQN SEED COUNT FACTOR\n";
    return 2;
  }
  std::string bytes(static_cast<size_t>(count) * sizeof(float), '\0');
  for (int64_t i = 0; i < count; ++i) {
    // Seeded values are multiples of 2^-24 in [-0.5, 0.5): float32 holds
    // them, and their product with a small integer, exactly.
    const float value = static_cast<float>(
        summon::core::SeededValue(argv[1], seed, i) * factor);
    std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof(float));
  }
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
