#include "client/files/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::client {
namespace {

absl::Status ErrnoError(int error, absl::string_view what,
                        absl::string_view path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// `path` with every symbolic link in its last component followed; a link to
// a name that does not exist yet resolves to that name.
absl::StatusOr<std::string> FollowLinks(std::string path) {
  for (int hops = 0; hops < 40; ++hops) {
    struct stat info;
    // Nothing there (or an unusable path): open or create reports it.
    if (::lstat(path.c_str(), &info) != 0) return path;
    if (!S_ISLNK(info.st_mode)) return path;
    char link[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
    if (n < 0) return ErrnoError(errno, "cannot read the link", path);
    std::string next(link, static_cast<size_t>(n));
    path =
        next.front() == '/' ? next : absl::StrCat(DirectoryOf(path), "/", next);
  }
  return ErrnoError(ELOOP, "cannot follow the links of", path);
}

// A connected stream socket to the Unix socket at `path`.
absl::StatusOr<int> ConnectUnixSocket(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return ErrnoError(ENAMETOOLONG, "cannot connect to", path);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "cannot connect to", path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address),
                sizeof(address)) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, "cannot connect to", path);
  }
  return fd;
}

// The mode a new file gets: 0666 less the umask.
mode_t NewFileMode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("no output file named");
  absl::StatusOr<std::string> target = FollowLinks(path);
  if (!target.ok()) return target.status();
  struct stat info;
  const bool exists = ::stat(target->c_str(), &info) == 0;
  if (exists && S_ISDIR(info.st_mode)) {
    return ErrnoError(EISDIR, "cannot write", path);
  }
  if (exists && S_ISSOCK(info.st_mode)) {
    absl::StatusOr<int> fd = ConnectUnixSocket(*target);
    if (!fd.ok()) return fd.status();
    return OutputFile(*fd, path, *std::move(target), "");
  }
  if (exists && !S_ISREG(info.st_mode)) {
    // A device or a FIFO: in place, never truncated, replaced or unlinked.
    const int fd = ::open(target->c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return ErrnoError(errno, "cannot open", path);
    return OutputFile(fd, path, *std::move(target), "");
  }
  std::string temp = absl::StrCat(*target, ".XXXXXX");
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot create", path);
  // mkostemp creates 0600: a replaced file keeps its mode, a new one gets
  // what open(2) would have given it.
  const mode_t mode = exists ? info.st_mode & 07777 : NewFileMode();
  if (::fchmod(fd, mode) != 0) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return ErrnoError(error, "cannot set the mode of", path);
  }
  return OutputFile(fd, path, *std::move(target), std::move(temp));
}

OutputFile::OutputFile(int fd, std::string path, std::string target,
                       std::string temp)
    : fd_(fd),
      path_(std::move(path)),
      target_(std::move(target)),
      temp_(std::move(temp)) {}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      target_(std::move(other.target_)),
      temp_(std::exchange(other.temp_, "")) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    Discard();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    target_ = std::move(other.target_);
    temp_ = std::exchange(other.temp_, "");
  }
  return *this;
}

OutputFile::~OutputFile() { Discard(); }

void OutputFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

absl::Status OutputFile::Write(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("the file is closed");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError(n < 0 ? errno : EIO, "cannot write", path_);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("the file is closed");
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int error = errno;
    Discard();
    return ErrnoError(error, "cannot write", path_);
  }
  if (temp_.empty()) return absl::OkStatus();
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    Discard();
    return ErrnoError(error, "cannot rename onto", path_);
  }
  temp_.clear();
  return absl::OkStatus();
}

absl::Status WriteOutputFile(const std::string& path, absl::string_view bytes) {
  absl::StatusOr<OutputFile> file = OutputFile::Open(path);
  if (!file.ok()) return file.status();
  if (absl::Status written = file->Write(bytes); !written.ok()) return written;
  return file->Commit();
}

}  // namespace summon::client
