// summonctl tensor get MODEL FQN --out FILE: a one-shot read for scripts.
// It opens a read-only session of exactly that parameter, reads it as
// tensor read does and closes the session, so no session outlives the
// command: on an error the session is closed before the error is printed,
// and on Ctrl-C (SIGINT, SIGTERM, SIGHUP) a helper thread closes it before
// summonctl exits.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cli/summonctl_internal.h"
#include "client/lib/session_handle.h"

namespace summon::client {
namespace {

// Long enough for the renewer (every lease/3) to keep it, short enough that
// a SIGKILLed summonctl's session goes soon.
constexpr uint32_t kOneShotLeaseSeconds = 30;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The write end of the self-pipe a signal wakes the closer through; a
// handler may only write(2).
int g_signal_pipe = -1;

void OnSignal(int signal_number) {
  const char byte = static_cast<char>(signal_number);
  [[maybe_unused]] ssize_t ignored = write(g_signal_pipe, &byte, 1);
}

// While alive, a signal closes (aborts) the session from a thread of its
// own and exits as the shell expects (128 + the signal).
class CloseOnSignal {
 public:
  CloseOnSignal(const SummonClient& client, std::string session_id)
      : client_(client), session_id_(std::move(session_id)) {
    if (pipe2(fds_, O_CLOEXEC) != 0) return;
    g_signal_pipe = fds_[1];
    struct sigaction action = {};
    action.sa_handler = &OnSignal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], &action, &previous_[i]);
    }
    thread_ = std::thread([this] { Watch(); });
  }
  CloseOnSignal(const CloseOnSignal&) = delete;
  CloseOnSignal& operator=(const CloseOnSignal&) = delete;
  ~CloseOnSignal() {
    if (!thread_.joinable()) return;
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], &previous_[i], nullptr);
    }
    const char stop = 0;  // Not a signal: the watcher just returns.
    [[maybe_unused]] ssize_t ignored = write(fds_[1], &stop, 1);
    thread_.join();
    g_signal_pipe = -1;
    close(fds_[0]);
    close(fds_[1]);
  }

 private:
  void Watch() {
    char byte = 0;
    while (read(fds_[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (byte == 0) return;
    // The main thread may be inside a read; the process ends here.
    [[maybe_unused]] const auto closed =
        client_.CloseSession(session_id_, /*abort=*/true, /*force=*/false);
    std::_Exit(128 + byte);
  }

  const SummonClient& client_;
  const std::string session_id_;
  int fds_[2] = {-1, -1};
  struct sigaction previous_[std::size(kSignals)] = {};
  std::thread thread_;
};

}  // namespace

absl::Status TensorGet(const CommandContext& c) {
  const std::string& model = c.args.positionals[0];
  const std::string& fqn = c.args.positionals[1];
  const bool grad = c.args.Has("grad");
  v1::SessionOptions options;
  options.mutable_params()->add_fqns(fqn);
  options.set_writeback(false);
  options.set_with_grads(grad);
  options.set_lease_seconds(kOneShotLeaseSeconds);
  absl::StatusOr<std::unique_ptr<Session>> session =
      c.client.Open(model, options);
  if (!session.ok()) return session.status();
  absl::Status read;
  {
    CloseOnSignal on_signal(c.client, (*session)->id());
    read = ReadTensorToFile(c, {(*session)->id(), fqn, grad});
  }
  const absl::Status closed = (*session)->Abort();
  return read.ok() ? closed : read;
}

}  // namespace summon::client
