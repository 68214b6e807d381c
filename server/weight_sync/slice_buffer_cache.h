#ifndef SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_CACHE_H_
#define SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_CACHE_H_

// Callers' slice buffers kept mapped between reads. A puller reuses one
// buffer for every version (summon.sync.pull, SliceBuffer in C++), and
// mapping it anew each time cost a 2 GB answer ~70-110 ms of populating its
// page tables and ~45 ms of unmapping them (bench/RESULTS.md, "Weight
// sync's local pull"). A buffer arrives as a new descriptor with every read;
// its inode says whether it is one already mapped.
//
// A kept mapping holds the caller's memory: it is dropped once unused for
// `idle`, or when `max_mappings` others are newer. So a caller's buffer
// lives on in summond for at most `idle` after its last read.

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/weight_sync/slice_buffer.h"

namespace summon::server {

class SliceBufferCache {
 public:
  struct Options {
    int max_mappings = 4;
    absl::Duration idle = absl::Seconds(60);
  };
  explicit SliceBufferCache(Options options);
  // Unmaps what no read still writes through.
  ~SliceBufferCache();
  SliceBufferCache(const SliceBufferCache&) = delete;
  SliceBufferCache& operator=(const SliceBufferCache&) = delete;

  // SliceBuffer::Map's checks and answer (takes `fd`), through the mapping
  // of the same buffer kept from an earlier read when there is one.
  absl::StatusOr<SliceBuffer> Map(int fd, int64_t total_bytes,
                                  const std::vector<std::string>& names,
                                  const std::vector<int64_t>& offsets,
                                  const std::vector<int64_t>& bytes);

  int mapped() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t reused() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Kept {
    SliceBufferIdentity identity;
    std::shared_ptr<SliceMapping> mapping;
    absl::Time last_used;
  };
  // Takes the entries past `max_mappings` or idle at `now` out of kept_
  // into `dropped`, to be unmapped without the lock.
  void TakeExpiredLocked(absl::Time now,
                         std::vector<std::shared_ptr<SliceMapping>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Sweep();

  const Options options_;
  mutable absl::Mutex mu_;
  std::list<Kept> kept_ ABSL_GUARDED_BY(mu_);  // Most recently used first.
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_SLICE_BUFFER_CACHE_H_
