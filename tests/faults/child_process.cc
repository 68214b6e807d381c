#include "tests/faults/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace summon::tests {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

ExitStatus FromWaitStatus(int status) {
  ExitStatus result;
  if (WIFEXITED(status)) result.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

// The test's environment with `overrides` applied.
std::vector<std::string> ChildEnvironment(
    const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (overrides.count(name) == 0) env.push_back(text);
  }
  for (const auto& [name, value] : overrides) {
    if (!value.empty()) env.push_back(absl::StrCat(name, "=", value));
  }
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

std::string ExitStatusText(const ExitStatus& status) {
  if (status.signal.has_value()) {
    return absl::StrCat("killed by signal ", *status.signal, " (",
                        strsignal(*status.signal), ")");
  }
  return absl::StrCat("exited with status ", status.code.value_or(-1));
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const Spec& spec) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int pipe_fds[2] = {-1, -1};
  if (spec.pipe_stdout) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      posix_spawn_file_actions_destroy(&actions);
      return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
    }
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  }
  if (!spec.log_path.empty()) {
    const int flags = O_WRONLY | O_CREAT | O_APPEND;
    if (!spec.pipe_stdout) {
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                       spec.log_path.c_str(), flags, 0644);
      posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions, STDERR_FILENO,
                                       spec.log_path.c_str(), flags, 0644);
    }
  }
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> env = ChildEnvironment(spec.env);
  std::vector<char*> argv_pointers = Pointers(argv);
  std::vector<char*> env_pointers = Pointers(env);
  ChildProcess child;
  const int error =
      posix_spawn(&child.pid_, argv_pointers[0], &actions, nullptr,
                  argv_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spec.pipe_stdout) close(pipe_fds[1]);
  if (error != 0) {
    child.pid_ = -1;
    if (spec.pipe_stdout) close(pipe_fds[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start ", spec.argv[0], ": ", strerror(error)));
  }
  child.stdout_fd_ = pipe_fds[0];
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdout_fd_(std::exchange(other.stdout_fd_, -1)),
      buffered_(std::move(other.buffered_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (running()) Kill().IgnoreError();
    CloseStdout();
    pid_ = std::exchange(other.pid_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    buffered_ = std::move(other.buffered_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (running()) Kill().IgnoreError();
  CloseStdout();
}

void ChildProcess::CloseStdout() {
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

absl::Status ChildProcess::Signal(int signal) const {
  if (!running()) {
    return absl::FailedPreconditionError("the process has already ended");
  }
  if (kill(pid_, signal) != 0) {
    return absl::InternalError(
        absl::StrCat("kill(", pid_, ", ", signal, "): ", strerror(errno)));
  }
  if (signal != SIGSTOP) return absl::OkStatus();
  // kill() returns once the stop is queued; until one of the child's threads
  // takes it, the others keep running (and answering RPCs) on a loaded
  // machine. Stopped means every thread stopped, as waitpid reports it.
  // WNOWAIT: an exit stays for PollExit / WaitExit to reap.
  siginfo_t info{};
  if (waitid(P_PID, pid_, &info, WSTOPPED | WEXITED | WNOWAIT) != 0 ||
      info.si_code != CLD_STOPPED) {
    return absl::UnavailableError(
        absl::StrCat("process ", pid_, " ended instead of stopping"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExitStatus> ChildProcess::Kill() {
  if (absl::Status sent = Signal(SIGKILL); !sent.ok()) return sent;
  int status = 0;
  if (waitpid(pid_, &status, 0) != pid_) {
    return absl::InternalError(absl::StrCat("waitpid: ", strerror(errno)));
  }
  pid_ = -1;
  return FromWaitStatus(status);
}

std::optional<ExitStatus> ChildProcess::PollExit() {
  if (!running()) return std::nullopt;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  return FromWaitStatus(status);
}

absl::StatusOr<ExitStatus> ChildProcess::WaitExit(absl::Duration timeout) {
  if (!running()) {
    return absl::FailedPreconditionError("the process has already ended");
  }
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    if (std::optional<ExitStatus> exited = PollExit()) return *exited;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still runs after ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  if (stdout_fd_ < 0) {
    return absl::FailedPreconditionError("stdout is not piped");
  }
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    if (const size_t newline = buffered_.find('\n');
        newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line from process ", pid_, " within ",
                       absl::FormatDuration(timeout)));
    }
    pollfd ready{stdout_fd_, POLLIN, 0};
    const int polled =
        poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (polled < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (polled <= 0) continue;
    char bytes[256];
    const ssize_t got = read(stdout_fd_, bytes, sizeof(bytes));
    if (got == 0) {
      return absl::UnavailableError(
          absl::StrCat("process ", pid_, " closed its stdout"));
    }
    if (got > 0) buffered_.append(bytes, static_cast<size_t>(got));
  }
}

}  // namespace summon::tests
