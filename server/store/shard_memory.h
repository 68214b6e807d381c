#ifndef SUMMON_SERVER_STORE_SHARD_MEMORY_H_
#define SUMMON_SERVER_STORE_SHARD_MEMORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor_stats.h"
#include "core/watch_stats.h"

namespace summon::server {

// Where a shard store keeps the bytes of one segment (a rank's params,
// grads or staged data): the seam between the store's rules (headers,
// generations, staging, commits) and the memory the shards live in. Host
// placement keeps them in the POSIX shared-memory segment itself; device
// placement in one allocation on a GPU (server/gpu/cuda_shard_memory), the
// shared-memory segment then holding only the header. Every access the store
// and its callers make goes through these copies, so nothing above the store
// forks per placement.
class ShardMemory {
 public:
  virtual ~ShardMemory() = default;

  virtual int64_t size() const = 0;
  // The bytes' host address, or nullptr when they are not host-addressable
  // (device memory): callers then copy.
  virtual uint8_t* host() const = 0;
  // -1 for host memory, else the CUDA device ordinal.
  virtual int device() const = 0;
  // The address a device communicator (NCCL) reads and writes: the device
  // pointer; nullptr for host memory (host() is Gloo's).
  virtual void* device_data() const = 0;

  // Host <-> shard copies of [offset, offset + bytes); OUT_OF_RANGE beyond
  // the memory.
  virtual absl::Status Read(int64_t offset, void* to, int64_t bytes) const = 0;
  virtual absl::Status Write(int64_t offset, const void* from,
                             int64_t bytes) = 0;
  // [from_offset, from_offset + bytes) of `from` (the same placement) to
  // [offset, offset + bytes) here, without passing through the host for
  // device memory: staging and commits on one GPU, a gather's local slices
  // into a session copy on a GPU of the node (a peer copy when the GPUs
  // differ).
  virtual absl::Status CopyRange(const ShardMemory& from, int64_t from_offset,
                                 int64_t offset, int64_t bytes) = 0;
  // CopyRange of the same range.
  absl::Status CopyFrom(const ShardMemory& from, int64_t offset,
                        int64_t bytes) {
    return CopyRange(from, offset, offset, bytes);
  }
  // [offset, offset + bytes) to the host in order, in chunks of at most
  // `chunk_bytes` (every chunk full but the last), each handed to `sink`
  // (valid during the call); a sink error stops the transfer and is
  // returned. This default reads each chunk with Read into one host buffer
  // (host memory: the chunks are the memory itself); CUDA memory streams
  // through two pinned chunks, the next one copying while the sink takes
  // this one. OUT_OF_RANGE beyond the memory, INVALID_ARGUMENT for
  // chunk_bytes <= 0.
  using ChunkSink =
      std::function<absl::Status(const uint8_t* data, int64_t bytes)>;
  virtual absl::Status ReadChunks(int64_t offset, int64_t bytes,
                                  int64_t chunk_bytes,
                                  const ChunkSink& sink) const;
  // core::ComputeTensorStatistics of `numel` elements of `dtype` at `offset`,
  // computed where the bytes are: this default reads host memory in place
  // and copies other memory to the host first; CUDA memory runs kernels on
  // its GPU and returns only the numbers. OUT_OF_RANGE beyond the memory.
  virtual absl::StatusOr<core::TensorStatistics> Statistics(int64_t offset,
                                                            core::DType dtype,
                                                            int64_t numel,
                                                            int bins) const;
  // core::AccumulateWatchPartial of `numel` elements of `dtype` at `offset`
  // into `partial` (a watch's share of this memory), computed where the
  // bytes are: this default reads host memory in place and copies other
  // memory to the host in 8 MiB pieces; CUDA memory runs the watch kernels
  // on its GPU (server/gpu/device_watch.h), only the numbers coming back.
  // Each logs once which it does for device memory. OUT_OF_RANGE beyond
  // the memory; the kernel's errors otherwise.
  virtual absl::Status AccumulateWatch(
      int64_t offset, core::DType dtype, int64_t numel,
      const std::optional<core::HistogramRange>& range,
      core::WatchPartial* partial) const;
  // The handle another process maps the bytes with (cudaIpcMemHandle_t for
  // device memory); UNIMPLEMENTED for host memory, which is shared by name.
  virtual absl::StatusOr<std::string> IpcHandle() const = 0;
};

// Allocates device-placed shard memory for a store: one allocation per
// segment, zero-filled. `local_index` is the rank's index among the node's
// local ranks (which GPU it uses is the provider's choice).
class ShardMemoryProvider {
 public:
  virtual ~ShardMemoryProvider() = default;
  virtual absl::StatusOr<std::unique_ptr<ShardMemory>> Allocate(
      int local_index, int64_t bytes) const = 0;
  // For messages and `model describe`: "cuda", "fake-device".
  virtual std::string name() const = 0;
};

// Host bytes the memory does not own (a mapped shared-memory segment).
class HostShardMemory final : public ShardMemory {
 public:
  HostShardMemory(uint8_t* data, int64_t size) : data_(data), size_(size) {}

  int64_t size() const override { return size_; }
  uint8_t* host() const override { return data_; }
  int device() const override { return -1; }
  void* device_data() const override { return nullptr; }
  absl::Status Read(int64_t offset, void* to, int64_t bytes) const override;
  absl::Status Write(int64_t offset, const void* from, int64_t bytes) override;
  absl::Status CopyRange(const ShardMemory& from, int64_t from_offset,
                         int64_t offset, int64_t bytes) override;
  absl::StatusOr<std::string> IpcHandle() const override;

 private:
  uint8_t* const data_;
  const int64_t size_;
};

// OUT_OF_RANGE unless [offset, offset + bytes) lies within `size`.
absl::Status CheckShardRange(int64_t offset, int64_t bytes, int64_t size);
// OUT_OF_RANGE unless `numel` elements of `dtype` at `offset` lie within
// `size` bytes (Statistics' check).
absl::Status CheckTensorRange(int64_t offset, core::DType dtype, int64_t numel,
                              int64_t size);
// ReadChunks' arguments: a positive chunk size and a range within `size`.
absl::Status CheckChunkedRead(int64_t offset, int64_t bytes,
                              int64_t chunk_bytes, int64_t size);
// Both ranges of a CopyRange checked.
absl::Status CheckCopyRanges(const ShardMemory& from, int64_t from_offset,
                             const ShardMemory& to, int64_t offset,
                             int64_t bytes);

}  // namespace summon::server

#endif  // SUMMON_SERVER_STORE_SHARD_MEMORY_H_
