#include "server/gpu/pinned_streamer.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "server/gpu/cuda_status.h"

namespace summon::server::gpu {

absl::StatusOr<std::unique_ptr<PinnedStreamer>> PinnedStreamer::Create(
    int device, int64_t chunk_bytes) {
  if (chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk bytes must be positive, got ", chunk_bytes));
  }
  if (absl::Status set = FromCudaError(cudaSetDevice(device),
                                       absl::StrCat("CUDA device ", device));
      !set.ok()) {
    return set;
  }
  auto streamer = absl::WrapUnique(new PinnedStreamer(device, chunk_bytes));
  for (char*& chunk : streamer->chunks_) {
    if (absl::Status pinned =
            FromCudaError(cudaHostAlloc(reinterpret_cast<void**>(&chunk),
                                        static_cast<size_t>(chunk_bytes),
                                        cudaHostAllocDefault),
                          "cudaHostAlloc");
        !pinned.ok()) {
      return pinned;
    }
  }
  cudaStream_t stream = nullptr;
  if (absl::Status created = FromCudaError(
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
      !created.ok()) {
    return created;
  }
  streamer->stream_ = stream;
  for (CUevent_st*& event : streamer->copied_) {
    cudaEvent_t created_event = nullptr;
    if (absl::Status created = FromCudaError(
            cudaEventCreateWithFlags(&created_event, cudaEventDisableTiming),
            "cudaEventCreate");
        !created.ok()) {
      return created;
    }
    event = created_event;
  }
  return streamer;
}

PinnedStreamer::~PinnedStreamer() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  for (CUevent_st* event : copied_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  for (char* chunk : chunks_) {
    if (chunk != nullptr) cudaFreeHost(chunk);
  }
}

absl::Status PinnedStreamer::Read(const void* device_source, int64_t bytes,
                                  const Sink& sink) {
  if (absl::Status set = FromCudaError(cudaSetDevice(device_), "cudaSetDevice");
      !set.ok()) {
    return set;
  }
  const char* source = static_cast<const char*>(device_source);
  auto copy = [&](int slot, int64_t offset) {
    return FromCudaError(cudaMemcpyAsync(chunks_[slot], source + offset,
                                         static_cast<size_t>(std::min(
                                             chunk_bytes_, bytes - offset)),
                                         cudaMemcpyDeviceToHost, stream_),
                         "copy from the device");
  };
  if (bytes <= 0) return absl::OkStatus();
  if (absl::Status started = copy(0, 0); !started.ok()) return started;
  for (int64_t offset = 0, slot = 0; offset < bytes;
       offset += chunk_bytes_, slot ^= 1) {
    // Chunk `slot` was queued last: wait for it, queue the next one into the
    // other slot, then hand this one over while that copies.
    if (absl::Status done = FromCudaError(cudaStreamSynchronize(stream_),
                                          "copy from the device");
        !done.ok()) {
      return done;
    }
    const int64_t next = offset + chunk_bytes_;
    if (next < bytes) {
      if (absl::Status queued = copy(static_cast<int>(slot ^ 1), next);
          !queued.ok()) {
        return queued;
      }
    }
    absl::Status sunk =
        sink(chunks_[slot], std::min(chunk_bytes_, bytes - offset));
    if (!sunk.ok()) {
      cudaStreamSynchronize(stream_);
      return sunk;
    }
  }
  return absl::OkStatus();
}

absl::Status PinnedStreamer::Write(void* device_target, int64_t bytes,
                                   const Source& source) {
  if (absl::Status set = FromCudaError(cudaSetDevice(device_), "cudaSetDevice");
      !set.ok()) {
    return set;
  }
  char* target = static_cast<char*>(device_target);
  int64_t chunk = 0;
  for (int64_t offset = 0; offset < bytes; offset += chunk_bytes_, ++chunk) {
    const int slot = static_cast<int>(chunk & 1);
    // The copy queued two chunks ago read this slot: it must be done before
    // the slot is filled again. The previous chunk's copy goes on meanwhile.
    if (chunk >= 2) {
      if (absl::Status done = FromCudaError(cudaEventSynchronize(copied_[slot]),
                                            "copy to the device");
          !done.ok()) {
        return done;
      }
    }
    const int64_t length = std::min(chunk_bytes_, bytes - offset);
    if (absl::Status filled = source(chunks_[slot], length); !filled.ok()) {
      cudaStreamSynchronize(stream_);
      return filled;
    }
    if (absl::Status queued =
            FromCudaError(cudaMemcpyAsync(target + offset, chunks_[slot],
                                          static_cast<size_t>(length),
                                          cudaMemcpyHostToDevice, stream_),
                          "copy to the device");
        !queued.ok()) {
      return queued;
    }
    if (absl::Status recorded = FromCudaError(
            cudaEventRecord(copied_[slot], stream_), "cudaEventRecord");
        !recorded.ok()) {
      return recorded;
    }
  }
  return FromCudaError(cudaStreamSynchronize(stream_), "copy to the device");
}

}  // namespace summon::server::gpu
