#ifndef SUMMON_SERVER_GPU_PINNED_STREAMER_H_
#define SUMMON_SERVER_GPU_PINNED_STREAMER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct CUstream_st;
struct CUevent_st;

namespace summon::server::gpu {

// Moves device bytes to and from the host through two pinned chunks, so a
// tensor streams between GPU memory and a gRPC stream without a host copy
// of its own size: while the caller consumes (or fills) one chunk, the
// other is copying on this streamer's CUDA stream. One streamer serves one
// transfer at a time.
class PinnedStreamer {
 public:
  // UNAVAILABLE without a CUDA device; RESOURCE_EXHAUSTED when pinned memory
  // cannot be had; INVALID_ARGUMENT for chunk_bytes <= 0.
  static absl::StatusOr<std::unique_ptr<PinnedStreamer>> Create(
      int device, int64_t chunk_bytes);
  PinnedStreamer(const PinnedStreamer&) = delete;
  PinnedStreamer& operator=(const PinnedStreamer&) = delete;
  ~PinnedStreamer();

  int64_t chunk_bytes() const { return chunk_bytes_; }

  // Device -> host: `sink` gets [source, source + bytes) in order, chunk by
  // chunk (the pointer is valid during the call). A sink error stops the
  // transfer and is returned.
  using Sink = std::function<absl::Status(const char* data, int64_t bytes)>;
  absl::Status Read(const void* device_source, int64_t bytes, const Sink& sink);

  // Host -> device: `source` fills each chunk (exactly `bytes` asked) in
  // order; returns once every byte is on the device.
  using Source = std::function<absl::Status(char* data, int64_t bytes)>;
  absl::Status Write(void* device_target, int64_t bytes, const Source& source);

 private:
  PinnedStreamer(int device, int64_t chunk_bytes)
      : device_(device), chunk_bytes_(chunk_bytes) {}

  const int device_;
  const int64_t chunk_bytes_;
  char* chunks_[2] = {nullptr, nullptr};
  CUstream_st* stream_ = nullptr;
  // Per chunk slot: recorded after the last copy that read it (Write).
  CUevent_st* copied_[2] = {nullptr, nullptr};
};

}  // namespace summon::server::gpu

#endif  // SUMMON_SERVER_GPU_PINNED_STREAMER_H_
