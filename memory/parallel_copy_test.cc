#include "memory/parallel_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace summon::memory {
namespace {

// Every 8 bytes of the source are a 64-bit mix (splitmix64's finalizer, a
// bijection) of their index, so no run of 8 aligned bytes repeats anywhere:
// a piece copied from the wrong offset, twice, or not at all shows up as the
// first bad index. (A pattern of the index's low bits repeats, and a piece
// copied from a multiple of that period away would go unseen.)
std::vector<uint8_t> Pattern(int64_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (int64_t i = 0; i < bytes; ++i) {
    uint64_t x = static_cast<uint64_t>(i / 8) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    data[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
  }
  return data;
}

int64_t FirstMismatch(const uint8_t* a, const uint8_t* b, int64_t bytes) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (a[i] != b[i]) return i;
  }
  return -1;
}

TEST(ParallelCopyTest, UsesAtLeastOneAndAtMostFourThreads) {
  EXPECT_GE(ParallelCopyThreads(), 1);
  EXPECT_LE(ParallelCopyThreads(), 4);
}

TEST(ParallelCopyTest, CopiesEveryByteOfSizesAroundThePieceBoundaries) {
  const int64_t large = kParallelCopyMinBytes * 3 + 12345;
  const std::vector<uint8_t> source = Pattern(large + 7);
  for (const int64_t bytes :
       {int64_t{0}, int64_t{1}, int64_t{4095}, kParallelCopyMinBytes - 1,
        kParallelCopyMinBytes, kParallelCopyMinBytes + 1,
        kParallelCopyMinBytes * 2 + 65537, large}) {
    // Unaligned source and destination: pieces must not assume alignment.
    std::vector<uint8_t> target(bytes + 16, 0xEE);
    ParallelCopy(target.data() + 3, source.data() + 7, bytes);
    EXPECT_EQ(FirstMismatch(target.data() + 3, source.data() + 7, bytes), -1)
        << bytes << " bytes";
    // Nothing written outside [3, 3 + bytes).
    for (int64_t i :
         {int64_t{0}, int64_t{1}, int64_t{2}, bytes + 3, bytes + 15}) {
      EXPECT_EQ(target[i], 0xEE) << "byte " << i << " of " << bytes;
    }
  }
}

}  // namespace
}  // namespace summon::memory
