#include "memory/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace summon::memory {
namespace {

// Room for a few descriptors, so that extra ones arrive (and are closed)
// instead of being cut off with MSG_CTRUNC.
constexpr size_t kMaxDescriptors = 4;

}  // namespace

ssize_t SendWithDescriptor(int connection, absl::string_view bytes, int fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  return sendmsg(connection, &msg, MSG_NOSIGNAL);
}

ssize_t ReceiveWithDescriptor(int connection, char* buffer, size_t size,
                              int* fd) {
  iovec iov{buffer, size};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxDescriptors * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(connection, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* header = CMSG_FIRSTHDR(&msg); header != nullptr;
       header = CMSG_NXTHDR(&msg, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
      continue;
    }
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (*fd < 0) {
        *fd = received;
      } else {
        close(received);
      }
    }
  }
  return n;
}

}  // namespace summon::memory
