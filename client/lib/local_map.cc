#include "client/lib/local_map.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/lib/wire_dtype.h"
#include "memory/fd_passing.h"

namespace summon::client {

absl::StatusOr<int> ConnectToBroker(absl::string_view socket) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket.empty() || socket.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad broker socket '", socket, "'"));
  }
  // "@name": the abstract namespace, whose sun_path starts with NUL and is
  // not NUL-terminated.
  const bool abstract = socket[0] == '@';
  std::memcpy(address.sun_path, socket.data(), socket.size());
  if (abstract) address.sun_path[0] = '\0';
  const socklen_t length = static_cast<socklen_t>(
      offsetof(sockaddr_un, sun_path) + socket.size() + (abstract ? 0 : 1));
  const int connection = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connection < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  if (connect(connection, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    absl::Status error = absl::UnavailableError(
        absl::StrCat("cannot reach the daemon's socket ", socket, " (",
                     std::strerror(errno), ")"));
    close(connection);
    return error;
  }
  return connection;
}

absl::Status BrokerAnswer(ssize_t n, const char* reply, absl::string_view what,
                          absl::string_view socket) {
  if (n >= 1 && reply[0] == 'K') return absl::OkStatus();
  if (n < 1) {
    return absl::UnavailableError(
        absl::StrCat("the daemon's ", socket, " closed unanswered"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the daemon refused ", what, ": ",
                   absl::string_view(reply + 1, static_cast<size_t>(n - 1))));
}

absl::StatusOr<int> RedeemMapToken(absl::string_view socket,
                                   absl::string_view token) {
  absl::StatusOr<int> connected = ConnectToBroker(socket);
  if (!connected.ok()) {
    if (!absl::IsUnavailable(connected.status())) return connected.status();
    return absl::UnavailableError(
        absl::StrCat(connected.status().message(),
                     ": MapSession works on the daemon's host only"));
  }
  const int connection = *connected;
  if (send(connection, token.data(), token.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(token.size())) {
    absl::Status error = absl::UnavailableError(
        absl::StrCat("sending the map token: ", std::strerror(errno)));
    close(connection);
    return error;
  }
  char reply[512];
  int fd = -1;
  const ssize_t n =
      memory::ReceiveWithDescriptor(connection, reply, sizeof(reply), &fd);
  close(connection);
  if (n >= 1 && reply[0] == 'K' && fd >= 0) return fd;
  if (fd >= 0) close(fd);
  absl::Status answer = BrokerAnswer(n, reply, "the map token", "map socket");
  if (!answer.ok()) return answer;
  return absl::FailedPreconditionError(  // Accepted, but no descriptor came.
      absl::StrCat("the daemon refused the map token: ",
                   absl::string_view(reply + 1, static_cast<size_t>(n - 1))));
}

absl::StatusOr<MappedSession> MappedSession::Map(v1::MapSessionResponse grant) {
  absl::StatusOr<int> fd = RedeemMapToken(grant.socket(), grant.token());
  if (!fd.ok()) return fd.status();
  MappedSession mapped;
  mapped.grant_ = std::move(grant);
  mapped.size_ = static_cast<int64_t>(mapped.grant_.copy_bytes());
  if (mapped.size_ > 0) {
    // MAP_POPULATE: the page tables in one go instead of a fault per page
    // on first read.
    void* data = mmap(nullptr, static_cast<size_t>(mapped.size_), PROT_READ,
                      MAP_SHARED | MAP_POPULATE, *fd, 0);
    if (data == MAP_FAILED) {
      absl::Status error = absl::InternalError(
          absl::StrCat("mapping ", mapped.size_,
                       " bytes of a session copy: ", std::strerror(errno)));
      close(*fd);
      return error;
    }
    mapped.data_ = static_cast<const uint8_t*>(data);
  }
  close(*fd);  // The mapping keeps the memory.
  return mapped;
}

MappedSession::MappedSession(MappedSession&& other) noexcept
    : grant_(std::move(other.grant_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedSession& MappedSession::operator=(MappedSession&& other) noexcept {
  if (this != &other) {
    Reset();
    grant_ = std::move(other.grant_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedSession::~MappedSession() { Reset(); }

void MappedSession::Reset() {
  if (data_ != nullptr) {
    munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  }
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<absl::Span<const uint8_t>> MappedSession::Tensor(
    absl::string_view fqn) const {
  for (const v1::MappedTensor& tensor : grant_.tensors()) {
    if (tensor.info().fqn() != fqn) continue;
    const uint64_t bytes = static_cast<uint64_t>(tensor.info().numel()) *
                           ElementSize(tensor.info().dtype());
    if (bytes == 0) return absl::Span<const uint8_t>();
    if (tensor.byte_offset() + bytes > static_cast<uint64_t>(size_)) {
      return absl::InternalError(absl::StrCat(
          "tensor '", fqn, "' lies outside the mapped ", size_, " bytes"));
    }
    return absl::Span<const uint8_t>(data_ + tensor.byte_offset(), bytes);
  }
  return absl::NotFoundError(
      absl::StrCat("the mapped session has no tensor '", fqn, "'"));
}

}  // namespace summon::client
