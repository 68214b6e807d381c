#ifndef SUMMON_SERVER_TESTING_FAKE_DEVICE_MEMORY_H_
#define SUMMON_SERVER_TESTING_FAKE_DEVICE_MEMORY_H_

#include <atomic>
#include <memory>
#include <string>

#include "server/store/shard_memory.h"

namespace summon::server {

// Device placement without a GPU, for tests on CPU machines: heap bytes that
// are not host-addressable through the interface (host() is nullptr), so the
// store and everything above it take exactly the copy paths they take on a
// GPU. Device ordinal = local index; the IPC handle is 64 bytes naming the
// allocation. Counts copies so tests can tell the device paths ran.
class FakeDeviceMemoryProvider final : public ShardMemoryProvider {
 public:
  absl::StatusOr<std::unique_ptr<ShardMemory>> Allocate(
      int local_index, int64_t bytes) const override;
  std::string name() const override { return "fake-device"; }

  // Read/Write/CopyFrom calls on memory from this provider so far.
  int64_t copies() const { return copies_->load(); }
  // Allocations still alive.
  int64_t live_allocations() const { return live_->load(); }

 private:
  std::shared_ptr<std::atomic<int64_t>> copies_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> live_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_FAKE_DEVICE_MEMORY_H_
