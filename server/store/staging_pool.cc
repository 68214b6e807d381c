#include "server/store/staging_pool.h"

namespace summon::server {

bool StagingPool::Keep(int64_t bytes) {
  int64_t held = retained_.load();
  do {
    if (bytes > options_.max_bytes - held) return false;
  } while (!retained_.compare_exchange_weak(held, held + bytes));
  return true;
}

void StagingPool::Drop(int64_t bytes, bool reused) {
  retained_.fetch_sub(bytes);
  if (reused) reuses_.fetch_add(1);
}

}  // namespace summon::server
