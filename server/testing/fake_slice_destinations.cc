#include "server/testing/fake_slice_destinations.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::server {

class FakeSliceDestinations::Destination final : public SliceDestination {
 public:
  Destination(FakeSliceDestinations& owner, std::string handle, int64_t offset,
              int64_t capacity)
      : owner_(owner),
        handle_(std::move(handle)),
        offset_(offset),
        capacity_(capacity) {}

  absl::Status Write(int64_t at, const uint8_t* data, int64_t bytes) override {
    if (at < 0 || bytes < 0 || bytes > capacity_ - at) {
      return absl::InternalError(absl::StrCat(
          "write of [", at, ", ", at + bytes, ") past capacity ", capacity_));
    }
    absl::MutexLock lock(&owner_.mu_);
    std::vector<uint8_t>& memory = owner_.allocations_.at(handle_).bytes;
    std::memcpy(memory.data() + offset_ + at, data, bytes);
    ++owner_.writes_;
    return absl::OkStatus();
  }

 private:
  FakeSliceDestinations& owner_;
  const std::string handle_;
  const int64_t offset_;
  const int64_t capacity_;
};

std::string FakeSliceDestinations::Allocate(int device, int64_t bytes,
                                            uint8_t fill) {
  absl::MutexLock lock(&mu_);
  std::string handle = absl::StrCat("fake-ipc-", allocations_.size());
  handle.resize(kCudaIpcHandleBytes, '\0');
  allocations_[handle] = {device, std::vector<uint8_t>(bytes, fill)};
  return handle;
}

std::vector<uint8_t> FakeSliceDestinations::Bytes(
    const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  return allocations_.at(handle).bytes;
}

int64_t FakeSliceDestinations::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

absl::StatusOr<std::unique_ptr<SliceDestination>> FakeSliceDestinations::Open(
    const CudaIpcTarget& target) {
  if (target.device >= devices_) {
    return NoCudaDevice(target.device,
                        absl::StrCat(devices_, " CUDA device(s) visible"));
  }
  absl::MutexLock lock(&mu_);
  auto found = allocations_.find(target.ipc_handle);
  if (found == allocations_.end() || found->second.device != target.device) {
    return absl::UnavailableError(
        absl::StrCat("cuda_buffer: device ", target.device,
                     ": opening the IPC handle: no such allocation"));
  }
  const auto allocation = static_cast<int64_t>(found->second.bytes.size());
  if (target.offset > allocation || target.bytes > allocation - target.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_buffer: bytes [", target.offset, ", ",
                     target.offset + target.bytes,
                     ") pass the end of the shared CUDA allocation, which has ",
                     allocation, " bytes"));
  }
  return std::make_unique<Destination>(*this, target.ipc_handle, target.offset,
                                       target.bytes);
}

}  // namespace summon::server
