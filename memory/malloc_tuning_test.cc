#include "memory/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace summon::memory {
namespace {

// Blocks malloc mapped for themselves, at this moment.
size_t MappedBlocks() { return mallinfo2().hblks; }

// Touches every page, as a chunk being filled does.
void* Filled(size_t bytes) {
  void* block = std::malloc(bytes);
  std::memset(block, 0x5a, bytes);
  return block;
}

TEST(MallocTuning, ChunksComeFromTheArenasAndFreedMemoryIsKept) {
  constexpr size_t kChunk = size_t{1} << 20;
  constexpr size_t kLarge = size_t{16} << 20;
  // glibc's defaults: a fresh process maps a 1 MiB block on its own.
  const size_t before = MappedBlocks();
  void* chunk = Filled(kChunk);
  EXPECT_EQ(MappedBlocks(), before + 1);
  std::free(chunk);

  ASSERT_TRUE(KeepFreedMemoryForReuse());
  const size_t mapped = MappedBlocks();
  for (int i = 0; i < 8; ++i) {
    chunk = Filled(kChunk);
    EXPECT_EQ(MappedBlocks(), mapped);
    std::free(chunk);
  }
  // A freed 16 MiB block stays with malloc for the next one (below the
  // 64 MiB kept), instead of going back to the kernel.
  void* large = Filled(kLarge);
  EXPECT_EQ(MappedBlocks(), mapped);
  std::free(large);
  EXPECT_GE(mallinfo2().fordblks, kLarge);
}

}  // namespace
}  // namespace summon::memory
