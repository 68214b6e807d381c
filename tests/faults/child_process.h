#ifndef SUMMON_TESTS_FAULTS_CHILD_PROCESS_H_
#define SUMMON_TESTS_FAULTS_CHILD_PROCESS_H_

// One child process the fault harness starts and then breaks on purpose:
// SIGKILL (a machine failure), SIGSTOP / SIGCONT (a node frozen for a while),
// or waiting for it to kill itself at a fault point. Every wait is bounded.

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace summon::tests {

// How a child ended, as waitpid reports it.
struct ExitStatus {
  std::optional<int> code;    // Exited normally with this code.
  std::optional<int> signal;  // Killed by this signal.
};
std::string ExitStatusText(const ExitStatus& status);

class ChildProcess {
 public:
  struct Spec {
    std::vector<std::string> argv;  // argv[0] is the executable's path.
    // Set in the child's environment on top of the test's (an empty value
    // removes the variable).
    std::map<std::string, std::string> env;
    // Where stdout and stderr go (appended); empty: inherited.
    std::string log_path;
    // The child's stdout becomes a pipe read by ReadLine (log_path then
    // takes stderr only).
    bool pipe_stdout = false;
  };

  static absl::StatusOr<ChildProcess> Spawn(const Spec& spec);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // SIGKILL and reap, unless it already ended.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Started and not yet reaped.
  bool running() const { return pid_ > 0; }

  // Sends `signal` (SIGSTOP, SIGCONT, SIGTERM...); FAILED_PRECONDITION when
  // the child has already been reaped. SIGSTOP returns once every thread of
  // the child has stopped.
  absl::Status Signal(int signal) const;
  // SIGKILL, then reaps it (a stopped process dies too).
  absl::StatusOr<ExitStatus> Kill();
  // Reaps the child once it ends by itself; DEADLINE_EXCEEDED after
  // `timeout` (it keeps running then).
  absl::StatusOr<ExitStatus> WaitExit(absl::Duration timeout);
  // Nullopt while it runs; reaps it once it ended.
  std::optional<ExitStatus> PollExit();
  // The next line the child writes to its piped stdout, without the newline;
  // DEADLINE_EXCEEDED after `timeout`, UNAVAILABLE at end of file.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);

 private:
  void CloseStdout();

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffered_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_FAULTS_CHILD_PROCESS_H_
