#ifndef SUMMON_SERVER_TESTING_FAKE_SLICE_DESTINATIONS_H_
#define SUMMON_SERVER_TESTING_FAKE_SLICE_DESTINATIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/weight_sync/slice_destination.h"

namespace summon::server {

// CUDA IPC destinations without a GPU, for ReadSlices' cuda_buffer on CPU
// machines: "allocations" are host bytes named by 64-byte handles, on
// `devices` fake GPUs. Open refuses as summond's CUDA one does (no device:
// NoCudaDevice; past the allocation's end: INVALID_ARGUMENT; an unknown
// handle: UNAVAILABLE), and Write copies into the allocation at offset +
// at, so tests see exactly which bytes landed where.
class FakeSliceDestinations final : public DeviceSliceDestinations {
 public:
  explicit FakeSliceDestinations(int devices = 1) : devices_(devices) {}

  // A new allocation of `bytes` on `device`, every byte `fill`; its handle.
  std::string Allocate(int device, int64_t bytes, uint8_t fill);
  // The allocation's bytes now.
  std::vector<uint8_t> Bytes(const std::string& handle) const;
  // Write calls so far (every destination together).
  int64_t writes() const;

  absl::StatusOr<std::unique_ptr<SliceDestination>> Open(
      const CudaIpcTarget& target) override;

 private:
  struct Allocation {
    int device = 0;
    std::vector<uint8_t> bytes;
  };
  class Destination;

  const int devices_;
  mutable absl::Mutex mu_;
  std::map<std::string, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_FAKE_SLICE_DESTINATIONS_H_
