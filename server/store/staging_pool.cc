#include "server/store/staging_pool.h"

#include <algorithm>

namespace summon::server {

namespace {

bool KeepWithin(std::atomic<int64_t>& retained, int64_t limit, int64_t bytes) {
  int64_t held = retained.load();
  do {
    if (bytes > limit - held) return false;
  } while (!retained.compare_exchange_weak(held, held + bytes));
  return true;
}

}  // namespace

bool StagingPool::Keep(int64_t bytes) {
  return KeepWithin(retained_, options_.max_bytes, bytes);
}

bool StagingPool::KeepPrefault(int64_t bytes) {
  const int64_t limit =
      options_.prefault_limit_bytes > 0
          ? std::min(options_.max_bytes, options_.prefault_limit_bytes)
          : options_.max_bytes;
  if (KeepWithin(retained_, limit, bytes)) {
    prefaults_.fetch_add(1);
    return true;
  }
  prefault_refusals_.fetch_add(1);
  return false;
}

void StagingPool::Drop(int64_t bytes, bool reused) {
  retained_.fetch_sub(bytes);
  if (reused) reuses_.fetch_add(1);
}

}  // namespace summon::server
