#include "server/shard_memory.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace summon::server {

absl::Status CheckShardRange(int64_t offset, int64_t bytes, int64_t size) {
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("bytes [", offset, ", ", offset + bytes,
                     ") are outside a shard memory of ", size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status HostShardMemory::Read(int64_t offset, void* to,
                                   int64_t bytes) const {
  if (absl::Status status = CheckShardRange(offset, bytes, size_);
      !status.ok()) {
    return status;
  }
  if (bytes > 0) std::memcpy(to, data_ + offset, bytes);
  return absl::OkStatus();
}

absl::Status HostShardMemory::Write(int64_t offset, const void* from,
                                    int64_t bytes) {
  if (absl::Status status = CheckShardRange(offset, bytes, size_);
      !status.ok()) {
    return status;
  }
  if (bytes > 0) std::memcpy(data_ + offset, from, bytes);
  return absl::OkStatus();
}

absl::Status HostShardMemory::CopyFrom(const ShardMemory& from, int64_t offset,
                                       int64_t bytes) {
  if (from.host() == nullptr) {
    return absl::InvalidArgumentError(
        "host shard memory copies only from host shard memory");
  }
  if (absl::Status status = CheckShardRange(offset, bytes, from.size());
      !status.ok()) {
    return status;
  }
  return Write(offset, from.host() + offset, bytes);
}

absl::StatusOr<std::string> HostShardMemory::IpcHandle() const {
  return absl::UnimplementedError(
      "host shards are shared through their shared-memory segment's name");
}

}  // namespace summon::server
