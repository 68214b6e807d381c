#ifndef SUMMON_CLIENT_CLI_PROGRESS_BAR_H_
#define SUMMON_CLIENT_CLI_PROGRESS_BAR_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace summon::client {

// One line of progress for a transfer of `total` bytes, redrawn in place
// ("\r") at most every 100 ms: bytes done, percent, rate and time left.
// summonctl shows it on stderr when stderr is a terminal (not with --quiet).
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, std::string what, int64_t total,
              std::function<absl::Time()> clock = absl::Now);
  // Counts `bytes` more; redraws when due.
  void Add(int64_t bytes);
  // Draws the final line and ends it.
  void Finish();

  // "12.0 MiB/1.0 GiB  1%  300.0 MiB/s  ETA 3s" for `done` of `total`
  // bytes after `elapsed`.
  static std::string Line(int64_t done, int64_t total, absl::Duration elapsed);

 private:
  void Draw();

  std::ostream& out_;
  const std::string what_;
  const int64_t total_;
  const std::function<absl::Time()> clock_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  int64_t done_ = 0;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_PROGRESS_BAR_H_
