#ifndef SUMMON_SERVER_CHECKPOINT_SAFETENSORS_H_
#define SUMMON_SERVER_CHECKPOINT_SAFETENSORS_H_

// The safetensors file format (Hugging Face) and its multi-file index:
// parsing with full validation, serialization, and opening a checkpoint of
// one or several files. No tensor data moves here: callers pread/pwrite the
// ranges the headers describe.
//
// A file is: an 8-byte little-endian u64 H, H bytes of UTF-8 JSON, then the
// data. The JSON maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} with offsets relative to the first data byte,
// plus an optional "__metadata__" object of string to string.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace summon::server {

// `status` with `label` (a file, usually) in front of its message.
absl::Status Labelled(absl::string_view label, const absl::Status& status);

// Headers larger than this are refused before anything is allocated, so a
// corrupt length cannot make the daemon allocate gigabytes.
inline constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;

// The name of the Hugging Face index of a multi-file checkpoint directory.
inline constexpr absl::string_view kSafetensorsIndexName =
    "model.safetensors.index.json";

struct SafetensorsEntry {
  std::string name;
  core::DType dtype = core::DType::kFloat32;
  core::Shape shape;
  int64_t numel = 0;
  // Byte range [begin, end) relative to the header's data_start.
  int64_t begin = 0;
  int64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // In the header's order.
  std::map<std::string, std::string> metadata;
  // Absolute file offset of the first data byte: 8 + H.
  int64_t data_start = 0;

  // The entry named `name`, or nullptr.
  const SafetensorsEntry* Find(absl::string_view name) const;
};

// Parses and validates the JSON header of a file of `file_size` bytes whose
// header is `header_json` (so data starts at 8 + header_json.size()).
// INVALID_ARGUMENT, naming the tensor where there is one, for: invalid JSON or
// UTF-8, a duplicate key anywhere, a non-object where an object belongs,
// "__metadata__" values that are not strings, a missing or mistyped dtype,
// shape or data_offsets, a dtype summon does not know, a negative dimension or
// a byte size that overflows int64, offsets outside the data or end < begin,
// end - begin != numel * element size, and two tensors sharing bytes.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view header_json, int64_t file_size);

// Reads and parses the header of the open file `fd` with pread. `name` only
// labels error messages. INVALID_ARGUMENT when the file is shorter than 8
// bytes, H exceeds the file or kMaxSafetensorsHeaderBytes, or the header is
// invalid as above; a failing read is absl::ErrnoToStatus of its errno.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(int fd,
                                                        absl::string_view name);

// Opens `path` read-only and reads its header.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeaderFromFile(
    const std::string& path);

// The 8-byte length followed by the JSON header, "__metadata__" first (when
// `header.metadata` is not empty) and the tensors in `header.entries` order,
// padded with spaces so the data starts at a multiple of 8 bytes.
// `header.data_start` is ignored; the data starts at the returned size.
std::string SerializeSafetensorsHeader(const SafetensorsHeader& header);

// A Hugging Face "model.safetensors.index.json": {"metadata": {...},
// "weight_map": {"tensor name": "file name"}}.
struct SafetensorsIndex {
  // Tensor name -> file name, in the index's order.
  std::vector<std::pair<std::string, std::string>> weight_map;
  // Serialized as "metadata"; "total_size" (a number in Hugging Face's files)
  // is kept as its decimal text when parsed.
  std::map<std::string, std::string> metadata;
};

// INVALID_ARGUMENT for invalid JSON, duplicate keys, a missing or mistyped
// weight_map, or a file name that is empty, ".", ".." or contains '/' (an
// index may only name files beside it).
absl::StatusOr<SafetensorsIndex> ParseSafetensorsIndex(absl::string_view json);

// Writes "total_size" (`total_bytes`, as a JSON number, as Hugging Face does)
// and the metadata strings, then the weight map.
std::string SerializeSafetensorsIndex(const SafetensorsIndex& index,
                                      int64_t total_bytes);

// Closes a file descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ScopedFd& operator=(ScopedFd&&) = delete;
  ~ScopedFd();
  int get() const { return fd_; }

 private:
  int fd_;
};

// One open file of a checkpoint.
struct SafetensorsFile {
  std::string path;
  ScopedFd fd;
  SafetensorsHeader header;
};

// A tensor of an open checkpoint: entry `entry` of file `file`'s header.
struct SafetensorsTensorRef {
  int file = 0;
  int entry = 0;
};

// Every tensor of a checkpoint with its file open, in checkpoint order (by
// file, then data offset).
struct SafetensorsCheckpoint {
  std::vector<SafetensorsFile> files;
  std::vector<SafetensorsTensorRef> tensors;
  std::map<std::string, int, std::less<>> by_name;  // Index into tensors.

  const SafetensorsEntry& Entry(const SafetensorsTensorRef& tensor) const {
    return files[tensor.file].header.entries[tensor.entry];
  }
};

// Opens a checkpoint given as any of:
//   - a .safetensors file;
//   - a Hugging Face index file (a name ending in ".json", normally
//     model.safetensors.index.json) whose weight_map names files beside it;
//   - a directory holding model.safetensors.index.json, or, without an index,
//     exactly one *.safetensors file.
// Files are opened once each and their headers validated; a tensor named in
// an index must be in the file the index names (tensors of a file that the
// index does not name are not part of the checkpoint). Checkpoint order is
// by file name, then data offset. NOT_FOUND when `path`, or a file its index
// names, does not exist; INVALID_ARGUMENT, naming the file, for anything
// malformed.
// Asked about each file a checkpoint load opens, right after opening it and
// before reading from it; a non-OK status refuses the file and the load. The
// daemon's (CheckpointRoots::Admission) checks that the opened file lies
// beneath a checkpoint root, whatever symlinks led there. Null: any file.
using FileAdmission =
    std::function<absl::Status(int fd, const std::string& path)>;
absl::StatusOr<SafetensorsCheckpoint> OpenSafetensorsCheckpoint(
    const std::string& path, const FileAdmission& admit = nullptr);

// Positional I/O on safetensors files: loops over short transfers and EINTR.
// PreadFully returns INVALID_ARGUMENT when the file ends first (a file
// shorter than its header says); both pass OS errors on as ErrnoToStatus.
absl::Status PreadFully(int fd, void* data, int64_t bytes, int64_t offset);
absl::Status PwriteFully(int fd, const void* data, int64_t bytes,
                         int64_t offset);

}  // namespace summon::server

#endif  // SUMMON_SERVER_CHECKPOINT_SAFETENSORS_H_
