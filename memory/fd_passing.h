#ifndef SUMMON_MEMORY_FD_PASSING_H_
#define SUMMON_MEMORY_FD_PASSING_H_

// A file descriptor sent with a few bytes over a Unix socket (SCM_RIGHTS):
// how a shared-memory segment changes hands between summond and a client on
// the same host (MapSession's mapping to the client, a SliceBuffer to the
// daemon). One implementation of the control-message handling for both
// sides.

#include <sys/types.h>

#include <cstddef>

#include "absl/strings/string_view.h"

namespace summon::memory {

// sendmsg of `bytes` on `connection` with `fd` attached (none when fd < 0),
// MSG_NOSIGNAL (a peer gone answers EPIPE, not a signal). Returns what
// sendmsg returned (bytes sent, or -1 with errno).
ssize_t SendWithDescriptor(int connection, absl::string_view bytes, int fd);

// One recvmsg of at most `size` bytes into `buffer`, descriptors received
// close-on-exec: the first that arrives while `*fd` < 0 is stored there,
// any other is closed (a peer cannot make this side hold descriptors it
// did not ask for). Returns what recvmsg returned (EINTR is the caller's).
ssize_t ReceiveWithDescriptor(int connection, char* buffer, size_t size,
                              int* fd);

}  // namespace summon::memory

#endif  // SUMMON_MEMORY_FD_PASSING_H_
