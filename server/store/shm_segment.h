#ifndef SUMMON_SERVER_STORE_SHM_SEGMENT_H_
#define SUMMON_SERVER_STORE_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// The shard store's segment format and one mapped POSIX shared-memory
// segment. Private to //server:shard_store.
namespace summon::server::shm {

inline constexpr char kMagic[8] = {'S', 'U', 'M', 'M', 'O', 'N', 'S', 'H'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kSessionIdBytes = 128;

// The fixed start of every segment; the unit table follows it. Only
// fixed-width fields, so trainers in other languages can read it too.
struct SegmentHeader {
  char magic[8];  // Written last: a segment without it was never finished.
  uint32_t format_version;
  uint32_t kind;  // SegmentKind.
  int32_t rank;
  int32_t num_units;
  uint64_t fingerprint;
  uint64_t incarnation;
  int64_t header_bytes;
  int64_t segment_bytes;
  uint32_t session_id_bytes;  // Staged segments only.
  // kPlacementHost: the shard bytes follow the header in this segment.
  // kPlacementDevice: the segment is the header alone and the bytes live in
  // GPU memory of the daemon that wrote it (they die with that process).
  uint32_t placement;
  char session_id[kSessionIdBytes];
  uint8_t padding[64];
};
static_assert(sizeof(SegmentHeader) == 256, "the header layout is shared");

struct UnitEntry {
  int64_t offset;
  // Params: the unit's generation. Staged: the target generation.
  uint64_t generation;
  uint64_t flags;  // Staged: kUnitStaged once the buffer holds the unit.
  // Params: the unit's external-write counter (R18). Staged: its value once
  // the staged writeback commits. Zero in segments of format version 1
  // written before the counter existed, which reads as "no external write".
  uint64_t external_writes;
};
static_assert(sizeof(UnitEntry) == 32, "the unit table layout is shared");

inline constexpr uint64_t kUnitStaged = 1;
inline constexpr uint32_t kPlacementHost = 0;  // Format 1's reserved zero.
inline constexpr uint32_t kPlacementDevice = 1;

// Generations and staged flags may be read by other processes while this one
// writes them; atomics keep every read untorn.
inline uint64_t LoadShared(const uint64_t* value) {
  return __atomic_load_n(value, __ATOMIC_ACQUIRE);
}
inline void StoreShared(uint64_t* value, uint64_t new_value) {
  __atomic_store_n(value, new_value, __ATOMIC_RELEASE);
}
inline uint32_t LoadShared(const uint32_t* value) {
  return __atomic_load_n(value, __ATOMIC_ACQUIRE);
}
inline void StoreShared(uint32_t* value, uint32_t new_value) {
  __atomic_store_n(value, new_value, __ATOMIC_RELEASE);
}

// shm_unlink; a name already gone is fine.
absl::Status Unlink(const std::string& name);

class Segment {
 public:
  // A new zero-filled segment (O_EXCL: ALREADY_EXISTS when the name is
  // taken). [0, reserve_bytes) is allocated now, so running out of shared
  // memory is RESOURCE_EXHAUSTED here instead of SIGBUS on first touch.
  static absl::StatusOr<std::unique_ptr<Segment>> Create(
      const std::string& name, int64_t size, int64_t reserve_bytes);
  // Maps an existing segment whole; NOT_FOUND when absent.
  static absl::StatusOr<std::unique_ptr<Segment>> Open(const std::string& name);

  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  // Unmaps; never unlinks.
  ~Segment();

  // Allocates [offset, offset + bytes) (see Create).
  absl::Status Reserve(int64_t offset, int64_t bytes);

  // The header's magic is written last, so a segment without it (or too
  // short to hold it) is what a process killed while creating it left.
  bool Unfinished() const;
  // Writes the magic: call once the rest of the header is in place.
  void PublishHeader();
  bool HasMagic() const;

  const std::string& name() const { return name_; }
  int64_t size() const { return size_; }
  uint8_t* data() const { return data_; }
  SegmentHeader* header() const {
    return reinterpret_cast<SegmentHeader*>(data_);
  }
  UnitEntry* units() const {
    return reinterpret_cast<UnitEntry*>(data_ + sizeof(SegmentHeader));
  }

 private:
  Segment(std::string name, int fd, uint8_t* data, int64_t size)
      : name_(std::move(name)), fd_(fd), data_(data), size_(size) {}

  const std::string name_;
  const int fd_;  // Kept for Reserve().
  uint8_t* const data_;
  const int64_t size_;
};

}  // namespace summon::server::shm

#endif  // SUMMON_SERVER_STORE_SHM_SEGMENT_H_
