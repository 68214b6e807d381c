// FIFOs in tests of what writes through to them (summonctl's --out, the
// output-file helper): a reader that never blocks and reads everything.

#ifndef SUMMON_CLIENT_TESTING_FIFO_READER_H_
#define SUMMON_CLIENT_TESTING_FIFO_READER_H_

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace summon::client {

// Opens the read end of the FIFO at `path` without waiting for a writer, so
// that a writer's open does not wait either and a test that fails cannot
// hang: its writer never meets this reader.
inline int OpenFifoReader(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
}

// Everything in the FIFO once its writer closed it; closes `fd`.
inline std::string Drain(int fd) {
  std::string data;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) {
    data.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

}  // namespace summon::client

#endif  // SUMMON_CLIENT_TESTING_FIFO_READER_H_
