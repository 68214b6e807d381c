#include "client/cli/progress_bar.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace summon::client {
namespace {

std::string Bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, std::string what, int64_t total,
                         std::function<absl::Time()> clock)
    : out_(out),
      what_(std::move(what)),
      total_(total),
      clock_(std::move(clock)),
      start_(clock_()) {}

void ProgressBar::Add(int64_t bytes) {
  done_ += bytes;
  if (clock_() - last_draw_ >= absl::Milliseconds(100)) Draw();
}

void ProgressBar::Finish() {
  Draw();
  out_ << "\n" << std::flush;
}

void ProgressBar::Draw() {
  last_draw_ = clock_();
  out_ << "\r" << what_ << "  " << Line(done_, total_, last_draw_ - start_)
       << "\x1b[K" << std::flush;
}

std::string ProgressBar::Line(int64_t done, int64_t total,
                              absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  std::string line =
      absl::StrFormat("%s/%s  %d%%", Bytes(static_cast<double>(done)),
                      Bytes(static_cast<double>(total)),
                      total > 0 ? static_cast<int>(100 * done / total) : 100);
  if (rate > 0) {
    absl::StrAppendFormat(&line, "  %s/s", Bytes(rate));
    absl::StrAppendFormat(
        &line, "  ETA %ds",
        static_cast<int>(static_cast<double>(total - done) / rate + 0.999));
  }
  return line;
}

}  // namespace summon::client
