#include "memory/malloc_tuning.h"

#include <malloc.h>

namespace summon::memory {

bool KeepFreedMemoryForReuse() {
  // Setting either value also stops glibc's own moving mmap threshold, so
  // both are set.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kArenaBlockMaxBytes)) ==
             1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kArenaKeepFreeBytes)) == 1;
}

}  // namespace summon::memory
