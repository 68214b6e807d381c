#ifndef SUMMON_SERVER_CHECKPOINT_CHECKPOINT_ROOTS_H_
#define SUMMON_SERVER_CHECKPOINT_CHECKPOINT_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/checkpoint/safetensors.h"

namespace summon::server {

// R20: the directories checkpoint loads and saves may touch
// (`summond --checkpoint-root`, default <data-dir>/checkpoints). A client's
// path resolves beneath them or is refused, so a remote client can neither
// write files elsewhere on the daemon's host nor probe files it could read.
class CheckpointRoots {
 public:
  // Each root is made absolute and canonical (symlinks resolved) once; the
  // first one receives relative paths.
  explicit CheckpointRoots(const std::vector<std::string>& roots);

  // A relative path is taken beneath the first root, an absolute one must
  // name a place beneath some root. INVALID_ARGUMENT for an empty path or
  // one with a ".." component; PERMISSION_DENIED when, with every existing
  // symlink followed, it lands outside every root; FAILED_PRECONDITION when
  // no root is configured. Returns the resolved absolute path.
  absl::StatusOr<std::string> Resolve(absl::string_view path) const;

  // Vets a file a checkpoint load opened, or a directory a save creates and
  // renames files in (FileAdmission): where the open actually landed (the
  // descriptor's path, every symlink followed, even one swapped in after
  // Resolve or named by an index) must lie beneath a root.
  // PERMISSION_DENIED otherwise, naming the path asked for, not where it
  // led; fails closed when the landing place cannot be read.
  FileAdmission Admission() const;

  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<std::string> roots_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_CHECKPOINT_CHECKPOINT_ROOTS_H_
