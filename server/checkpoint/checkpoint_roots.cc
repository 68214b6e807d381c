#include "server/checkpoint/checkpoint_roots.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;

// `path` with every symlink of its existing prefix followed.
fs::path Canonical(const fs::path& path) {
  std::error_code error;
  fs::path canonical = fs::weakly_canonical(fs::absolute(path, error), error);
  return error ? path.lexically_normal() : canonical;
}

bool IsBeneath(const std::string& path, const std::string& root) {
  return path == root ||
         absl::StartsWith(path, root == "/" ? root : root + "/");
}

}  // namespace

CheckpointRoots::CheckpointRoots(const std::vector<std::string>& roots) {
  for (const std::string& root : roots) {
    if (root.empty()) continue;
    roots_.push_back(Canonical(root).string());
  }
}

absl::StatusOr<std::string> CheckpointRoots::Resolve(
    absl::string_view text) const {
  if (text.empty()) return absl::InvalidArgumentError("path must be set");
  if (roots_.empty()) {
    return absl::FailedPreconditionError(
        "this daemon has no checkpoint root: start summond with "
        "--checkpoint-root DIR (or --data-dir)");
  }
  const fs::path path{std::string(text)};
  for (const fs::path& component : path) {
    if (component == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint path '", text, "' must not contain '..' components"));
    }
  }
  const std::string resolved =
      Canonical(path.is_absolute() ? path : fs::path(roots_.front()) / path)
          .string();
  for (const std::string& root : roots_) {
    if (IsBeneath(resolved, root)) return resolved;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "checkpoint path '", text,
      "' resolves outside the checkpoint roots (--checkpoint-root): ",
      absl::StrJoin(roots_, ", ")));
}

FileAdmission CheckpointRoots::Admission() const {
  return [roots = roots_](int fd, const std::string& path) -> absl::Status {
    std::error_code error;
    const fs::path landed =
        fs::read_symlink(absl::StrCat("/proc/self/fd/", fd), error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot tell where checkpoint file '", path,
                       "' lies (/proc/self/fd unreadable), so it is not read"));
    }
    for (const std::string& root : roots) {
      if (IsBeneath(landed.string(), root)) return absl::OkStatus();
    }
    // A path handed over by another node (a cluster's save or load) that
    // is not beneath this node's roots at all: no symlink involved.
    const std::string asked = Canonical(path).string();
    if (std::none_of(roots.begin(), roots.end(), [&](const std::string& root) {
          return IsBeneath(asked, root);
        })) {
      return absl::PermissionDeniedError(absl::StrCat(
          "checkpoint path '", path,
          "' is not beneath this node's checkpoint roots (--checkpoint-root): ",
          absl::StrJoin(roots, ", ")));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint path '", path,
        "' leads outside the checkpoint roots (--checkpoint-root) through a "
        "symlink: ",
        absl::StrJoin(roots, ", ")));
  };
}

}  // namespace summon::server
