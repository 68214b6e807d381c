#include "server/store/shard_memory.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memory/parallel_copy.h"
#include "spdlog/spdlog.h"

namespace summon::server {

absl::Status CheckShardRange(int64_t offset, int64_t bytes, int64_t size) {
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("bytes [", offset, ", ", offset + bytes,
                     ") are outside a shard memory of ", size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorRange(int64_t offset, core::DType dtype, int64_t numel,
                              int64_t size) {
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
  if (numel < 0 || (element > 0 && numel > size / element)) {
    return absl::OutOfRangeError(absl::StrCat(
        numel, " elements do not fit a shard memory of ", size, " bytes"));
  }
  return CheckShardRange(offset, numel * element, size);
}

absl::Status CheckChunkedRead(int64_t offset, int64_t bytes,
                              int64_t chunk_bytes, int64_t size) {
  if (chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks need a positive size, got ", chunk_bytes));
  }
  return CheckShardRange(offset, bytes, size);
}

absl::Status CheckCopyRanges(const ShardMemory& from, int64_t from_offset,
                             const ShardMemory& to, int64_t offset,
                             int64_t bytes) {
  if (absl::Status status = CheckShardRange(from_offset, bytes, from.size());
      !status.ok()) {
    return status;
  }
  return CheckShardRange(offset, bytes, to.size());
}

absl::Status ShardMemory::ReadChunks(int64_t offset, int64_t bytes,
                                     int64_t chunk_bytes,
                                     const ChunkSink& sink) const {
  if (absl::Status status =
          CheckChunkedRead(offset, bytes, chunk_bytes, size());
      !status.ok()) {
    return status;
  }
  std::vector<uint8_t> chunk;
  for (int64_t done = 0; done < bytes; done += chunk_bytes) {
    const int64_t n = std::min(chunk_bytes, bytes - done);
    const uint8_t* data = nullptr;
    if (host() != nullptr) {
      data = host() + offset + done;
    } else {
      chunk.resize(static_cast<size_t>(n));
      if (absl::Status status = Read(offset + done, chunk.data(), n);
          !status.ok()) {
        return status;
      }
      data = chunk.data();
    }
    if (absl::Status status = sink(data, n); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<core::TensorStatistics> ShardMemory::Statistics(
    int64_t offset, core::DType dtype, int64_t numel, int bins) const {
  if (absl::Status status = CheckTensorRange(offset, dtype, numel, size());
      !status.ok()) {
    return status;
  }
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
  if (host() != nullptr) {
    return core::ComputeTensorStatistics(dtype, host() + offset, numel, bins);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(numel * element));
  if (absl::Status status = Read(offset, bytes.data(), numel * element);
      !status.ok()) {
    return status;
  }
  return core::ComputeTensorStatistics(dtype, bytes.data(), numel, bins);
}

absl::Status ShardMemory::AccumulateWatch(
    int64_t offset, core::DType dtype, int64_t numel,
    const std::optional<core::HistogramRange>& range,
    core::WatchPartial* partial) const {
  if (absl::Status status = CheckTensorRange(offset, dtype, numel, size());
      !status.ok()) {
    return status;
  }
  if (host() != nullptr) {
    return core::AccumulateWatchPartial(dtype, host() + offset, numel, range,
                                        partial);
  }
  static std::once_flag logged;
  std::call_once(logged, [] {
    spdlog::info(
        "watch statistics of device-placed shards: copied to the host in "
        "8 MiB pieces (no watch kernels for this device memory)");
  });
  // Whole elements per piece, so no element straddles two.
  constexpr int64_t kPiece = int64_t{8} << 20;
  const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
  const int64_t piece_elements = std::max<int64_t>(1, kPiece / element);
  std::vector<uint8_t> piece;
  for (int64_t done = 0; done < numel;) {
    const int64_t count = std::min(piece_elements, numel - done);
    piece.resize(static_cast<size_t>(count * element));
    if (absl::Status read =
            Read(offset + done * element, piece.data(), count * element);
        !read.ok()) {
      return read;
    }
    if (absl::Status added = core::AccumulateWatchPartial(
            dtype, piece.data(), count, range, partial);
        !added.ok()) {
      return added;
    }
    done += count;
  }
  return absl::OkStatus();
}

absl::Status HostShardMemory::Read(int64_t offset, void* to,
                                   int64_t bytes) const {
  if (absl::Status status = CheckShardRange(offset, bytes, size_);
      !status.ok()) {
    return status;
  }
  memory::ParallelCopy(to, data_ + offset, bytes);
  return absl::OkStatus();
}

absl::Status HostShardMemory::Write(int64_t offset, const void* from,
                                    int64_t bytes) {
  if (absl::Status status = CheckShardRange(offset, bytes, size_);
      !status.ok()) {
    return status;
  }
  memory::ParallelCopy(data_ + offset, from, bytes);
  return absl::OkStatus();
}

absl::Status HostShardMemory::CopyRange(const ShardMemory& from,
                                        int64_t from_offset, int64_t offset,
                                        int64_t bytes) {
  if (from.host() == nullptr) {
    return absl::InvalidArgumentError(
        "host shard memory copies only from host shard memory");
  }
  if (absl::Status status =
          CheckCopyRanges(from, from_offset, *this, offset, bytes);
      !status.ok()) {
    return status;
  }
  return Write(offset, from.host() + from_offset, bytes);
}

absl::StatusOr<std::string> HostShardMemory::IpcHandle() const {
  return absl::UnimplementedError(
      "host shards are shared through their shared-memory segment's name");
}

}  // namespace summon::server
