#include "server/weight_sync/slice_buffer_cache.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

namespace summon::server {

SliceBufferCache::SliceBufferCache(Options options)
    : options_(options), sweeper_([this] { Sweep(); }) {}

SliceBufferCache::~SliceBufferCache() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sweeper_.join();
}

absl::StatusOr<SliceBuffer> SliceBufferCache::Map(
    int fd, int64_t total_bytes, const std::vector<std::string>& names,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& bytes) {
  absl::StatusOr<SliceBufferIdentity> identity =
      SliceBuffer::Check(fd, total_bytes, names, offsets, bytes);
  if (!identity.ok()) return identity.status();
  const int64_t needed = kSliceBufferHeaderBytes + total_bytes;
  std::vector<std::shared_ptr<SliceMapping>> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->identity.device != identity->device ||
          it->identity.inode != identity->inode) {
        continue;
      }
      if (it->mapping->size() >= needed) {
        // The same memory, mapped already: this descriptor is not needed.
        close(fd);
        it->last_used = absl::Now();
        kept_.splice(kept_.begin(), kept_, it);
        ++reused_;
        return SliceBuffer(kept_.front().mapping, total_bytes);
      }
      // It grew past its mapping: mapped again below, whole.
      dropped.push_back(std::move(it->mapping));
      kept_.erase(it);
      break;
    }
  }
  dropped.clear();  // Unmapped (unless a read still writes through it).
  // The whole file, so a later, larger answer fits the same mapping.
  absl::StatusOr<std::shared_ptr<SliceMapping>> mapping =
      SliceBuffer::MapChecked(fd, std::max(needed, identity->size));
  if (!mapping.ok()) return mapping.status();
  {
    absl::MutexLock lock(&mu_);
    kept_.push_front(Kept{*identity, *mapping, absl::Now()});
    TakeExpiredLocked(absl::Now(), &dropped);
  }
  return SliceBuffer(*std::move(mapping), total_bytes);
}

void SliceBufferCache::TakeExpiredLocked(
    absl::Time now, std::vector<std::shared_ptr<SliceMapping>>* dropped) {
  int position = 0;
  for (auto it = kept_.begin(); it != kept_.end(); ++position) {
    if (position >= options_.max_mappings ||
        now - it->last_used >= options_.idle) {
      dropped->push_back(std::move(it->mapping));
      it = kept_.erase(it);
    } else {
      ++it;
    }
  }
}

void SliceBufferCache::Sweep() {
  const absl::Duration tick =
      std::clamp(options_.idle / 4, absl::Milliseconds(10), absl::Seconds(5));
  for (;;) {
    std::vector<std::shared_ptr<SliceMapping>> dropped;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      if (stopping_) {
        for (Kept& kept : kept_) dropped.push_back(std::move(kept.mapping));
        kept_.clear();
        return;  // `dropped` unmaps on the way out, after the lock.
      }
      TakeExpiredLocked(absl::Now(), &dropped);
    }
  }
}

int SliceBufferCache::mapped() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(kept_.size());
}

int64_t SliceBufferCache::reused() const {
  absl::MutexLock lock(&mu_);
  return reused_;
}

}  // namespace summon::server
