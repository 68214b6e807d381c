#include "memory/fresh_memory.h"

#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace summon::memory {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Kilobytes of AnonHugePages this process has mapped (smaps_rollup).
int64_t AnonHugePagesKiB() {
  std::ifstream file("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) {
      return std::stoll(line.substr(sizeof("AnonHugePages:") - 1));
    }
  }
  return -1;
}

TEST(FreshMemoryTest, LargeBuffersAreZeroAndTwoMiBAligned) {
  absl::StatusOr<FreshMemory> memory = FreshMemory::Map(5 * kMiB + 3);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->size(), 5 * kMiB + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->data()) % kHugePageBytes, 0u);
  for (int64_t i = 0; i < memory->size(); i += 4093) {
    ASSERT_EQ(memory->data()[i], 0) << i;
  }
  EXPECT_EQ(memory->data()[memory->size() - 1], 0);
  std::memset(memory->data(), 0x5A, static_cast<size_t>(memory->size()));
  EXPECT_EQ(memory->data()[memory->size() - 1], 0x5A);
}

TEST(FreshMemoryTest, SmallAndEmptyBuffers) {
  absl::StatusOr<FreshMemory> small = FreshMemory::Map(100);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->size(), 100);
  EXPECT_FALSE(small->huge_pages());
  small->data()[99] = 7;
  absl::StatusOr<FreshMemory> empty = FreshMemory::Map(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
}

TEST(FreshMemoryTest, MovesKeepTheMapping) {
  absl::StatusOr<FreshMemory> memory = FreshMemory::Map(4 * kMiB);
  ASSERT_TRUE(memory.ok());
  memory->data()[1] = 9;
  FreshMemory moved = *std::move(memory);
  EXPECT_EQ(moved.data()[1], 9);
  FreshMemory assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data()[1], 9);
  EXPECT_EQ(assigned.size(), 4 * kMiB);
}

TEST(FreshMemoryTest, HugePagesWhereTheKernelOffersThem) {
  const std::string mode = TransparentHugePages();
  absl::StatusOr<FreshMemory> memory = FreshMemory::Map(64 * kMiB);
  ASSERT_TRUE(memory.ok());
  if (mode != "always" && mode != "madvise") {
    GTEST_SKIP() << "transparent huge pages are '" << mode
                 << "' here: fresh memory faults 4 KiB pages";
  }
  EXPECT_TRUE(memory->huge_pages());
  const int64_t before = AnonHugePagesKiB();
  std::memset(memory->data(), 1, static_cast<size_t>(memory->size()));
  // Fragmented memory can leave a fault with a 4 KiB page, so only some
  // huge pages are asked for, not all 32.
  EXPECT_GT(AnonHugePagesKiB(), before) << "no huge page was mapped";
}

TEST(AdviseHugePagesTest, TheAlignedInteriorOfAnotherAllocation) {
  const std::string mode = TransparentHugePages();
  std::string buffer;
  buffer.reserve(static_cast<size_t>(16 * kMiB + 12345));
  const bool advised = AdviseHugePages(buffer.data(), 16 * kMiB + 12345);
  if (mode == "always" || mode == "madvise") {
    EXPECT_TRUE(advised);
  }
  // The buffer works as before.
  buffer.append(static_cast<size_t>(16 * kMiB), 'x');
  EXPECT_EQ(buffer.size(), static_cast<size_t>(16 * kMiB));
  EXPECT_EQ(buffer.back(), 'x');
  EXPECT_FALSE(AdviseHugePages(buffer.data(), 3 * kMiB));
  EXPECT_FALSE(AdviseHugePages(nullptr, 64 * kMiB));
}

}  // namespace
}  // namespace summon::memory
