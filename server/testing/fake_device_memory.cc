#include "server/testing/fake_device_memory.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace summon::server {
namespace {

class FakeDeviceMemory final : public ShardMemory {
 public:
  FakeDeviceMemory(int device, int64_t bytes,
                   std::shared_ptr<std::atomic<int64_t>> copies,
                   std::shared_ptr<std::atomic<int64_t>> live)
      : device_(device),
        bytes_(static_cast<size_t>(bytes), 0),
        copies_(std::move(copies)),
        live_(std::move(live)) {
    ++*live_;
  }
  ~FakeDeviceMemory() override { --*live_; }

  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  uint8_t* host() const override { return nullptr; }
  int device() const override { return device_; }
  // Heap memory: what tests hand a Gloo communicator standing in for NCCL.
  void* device_data() const override {
    return const_cast<uint8_t*>(bytes_.data());
  }
  absl::Status Read(int64_t offset, void* to, int64_t bytes) const override {
    if (absl::Status status = CheckShardRange(offset, bytes, size());
        !status.ok()) {
      return status;
    }
    ++*copies_;
    if (bytes > 0) std::memcpy(to, bytes_.data() + offset, bytes);
    return absl::OkStatus();
  }
  absl::Status Write(int64_t offset, const void* from, int64_t bytes) override {
    if (absl::Status status = CheckShardRange(offset, bytes, size());
        !status.ok()) {
      return status;
    }
    ++*copies_;
    if (bytes > 0) std::memcpy(bytes_.data() + offset, from, bytes);
    return absl::OkStatus();
  }
  // Any fake device to any other, as CUDA peer copies between a node's
  // GPUs.
  absl::Status CopyRange(const ShardMemory& from, int64_t from_offset,
                         int64_t offset, int64_t bytes) override {
    const auto* source = dynamic_cast<const FakeDeviceMemory*>(&from);
    if (source == nullptr) {
      return absl::InvalidArgumentError(
          "device shard memory copies only from device shard memory");
    }
    if (absl::Status status =
            CheckCopyRanges(from, from_offset, *this, offset, bytes);
        !status.ok()) {
      return status;
    }
    return Write(offset, source->bytes_.data() + from_offset, bytes);
  }
  absl::StatusOr<std::string> IpcHandle() const override {
    std::string handle = absl::StrCat(
        "fake-ipc:", device_, ":", reinterpret_cast<uintptr_t>(bytes_.data()));
    handle.resize(64, '\0');
    return handle;
  }

 private:
  const int device_;
  std::vector<uint8_t> bytes_;
  const std::shared_ptr<std::atomic<int64_t>> copies_;
  const std::shared_ptr<std::atomic<int64_t>> live_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardMemory>> FakeDeviceMemoryProvider::Allocate(
    int local_index, int64_t bytes) const {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device allocation needs a positive size, got ", bytes));
  }
  return std::make_unique<FakeDeviceMemory>(local_index, bytes, copies_, live_);
}

}  // namespace summon::server
