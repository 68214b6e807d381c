#ifndef SUMMON_CLIENT_FILES_OUTPUT_FILE_H_
#define SUMMON_CLIENT_FILES_OUTPUT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::client {

// A file the user named for output, written without harming what is there:
//
// - a regular file, or a name that does not exist yet: written under a
//   temporary name in the same directory and renamed onto the name by
//   Commit, so a reader never sees half a file and a failed write leaves
//   the old file as it was;
// - a symbolic link: its final target is written the same way (temporary
//   name beside the target, renamed onto the target); the link stays;
// - anything that is not a regular file (a character device, a FIFO, a
//   Unix socket): written through in place, never replaced, never unlinked,
//   and no temporary file is created beside it.
//
// Errors name the path and say what failed (errno's words).
class OutputFile {
 public:
  // Opens `path` as above. A FIFO's open waits for its reader.
  static absl::StatusOr<OutputFile> Open(const std::string& path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Not committed: the temporary file is removed; a written-through file is
  // closed as it is.
  ~OutputFile();

  // Writes all of `bytes` (over short writes and EINTR).
  absl::Status Write(absl::string_view bytes);
  // Closes the file and, for a regular file, renames the temporary file
  // onto its target. After a failure nothing was renamed.
  absl::Status Commit();

  // Whether the bytes go straight into the named (non-regular) file.
  bool in_place() const { return temp_.empty(); }
  // The file written in the end: the path, or a symlink's final target.
  const std::string& target() const { return target_; }

 private:
  OutputFile(int fd, std::string path, std::string target, std::string temp);
  void Discard();

  int fd_ = -1;
  std::string path_;    // As the user wrote it, for messages.
  std::string target_;  // Symlinks resolved.
  std::string temp_;    // Empty: written in place.
};

// Writes `bytes` to `path` through an OutputFile (open, write, commit).
absl::Status WriteOutputFile(const std::string& path, absl::string_view bytes);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_FILES_OUTPUT_FILE_H_
