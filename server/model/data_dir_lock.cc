#include "server/model/data_dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace summon::server {
namespace {

// The holder's pid as it wrote it; "unknown" while it has not yet (it took
// the lock a moment ago) or when the file holds something else.
std::string HolderPid(int fd) {
  char buffer[32] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  const std::string text(
      absl::StripAsciiWhitespace(std::string(buffer, n > 0 ? n : 0)));
  if (text.empty() || text.find_first_not_of("0123456789") !=
                          std::string::npos) {
    return "unknown";
  }
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataDirLock>> DataDirLock::Acquire(
    const std::string& data_dir) {
  std::error_code error;
  std::filesystem::create_directories(data_dir, error);
  const std::string path =
      (std::filesystem::path(data_dir) / kFileName).string();
  // O_CLOEXEC: a child the daemon starts must not inherit (and so keep) the
  // lock after the daemon died.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open the data dir's lock file ", path, ": ", strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_error = errno;
    const std::string holder = HolderPid(fd);
    close(fd);
    if (lock_error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", data_dir, " in use by pid ", holder,
          " (another summond holds ", path,
          "): stop it first, or give this daemon its own --data-dir"));
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot lock ", path, ": ", strerror(lock_error)));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, pid.data(), pid.size(), 0) !=
          static_cast<ssize_t>(pid.size())) {
    const int write_error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot write this daemon's pid to ", path, ": ",
        strerror(write_error)));
  }
  return std::unique_ptr<DataDirLock>(new DataDirLock(fd));
}

DataDirLock::~DataDirLock() { close(fd_); }

}  // namespace summon::server
