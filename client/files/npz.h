#ifndef SUMMON_CLIENT_FILES_NPZ_H_
#define SUMMON_CLIENT_FILES_NPZ_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace summon::client {

// IEEE 802.3 CRC-32 (zip's and zlib's), continued from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, absl::string_view bytes);

// Writes NumPy's .npz format as it streams: a zip archive of .npy members,
// stored (no compression, as np.savez does), each member's CRC and size in a
// data descriptor after its bytes, so no member is held in memory and the
// sink is written front to back (a pipe or stdout will do). np.load reads it
// as a dict of arrays keyed by the member name without ".npy".
//
// Plain zip only, no zip64: INVALID_ARGUMENT once a member or the archive
// passes 4 GiB - 1 or 65535 members (safetensors has no such limit).
class NpzWriter {
 public:
  using Sink = std::function<absl::Status(absl::string_view)>;
  explicit NpzWriter(Sink sink) : sink_(std::move(sink)) {}

  // Starts the member `name` + ".npy"; its bytes (the .npy header, then the
  // data) follow through Write. Ends the previous member first.
  absl::Status Begin(absl::string_view name);
  absl::Status Write(absl::string_view bytes);
  // Ends the last member and writes the central directory.
  absl::Status Finish();

 private:
  struct Member {
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t offset = 0;  // Of its local header.
  };
  absl::Status Emit(absl::string_view bytes);
  absl::Status EndMember();

  Sink sink_;
  uint64_t written_ = 0;
  std::vector<Member> members_;
  bool open_ = false;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_FILES_NPZ_H_
