#include "client/lib/stream_watchdog.h"

namespace summon::client {

StreamWatchdog::StreamWatchdog(grpc::ClientContext* context,
                               absl::Duration idle)
    : context_(context), idle_(idle), last_progress_(absl::Now()) {
  if (idle_ != absl::InfiniteDuration())
    thread_ = std::thread([this] { Watch(); });
}

StreamWatchdog::~StreamWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StreamWatchdog::Progress() {
  absl::MutexLock lock(&mu_);
  last_progress_ = absl::Now();
}

bool StreamWatchdog::fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

void StreamWatchdog::Watch() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time due = last_progress_ + idle_;
    if (absl::Now() >= due) {
      fired_ = true;
      context_->TryCancel();
      return;
    }
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
  }
}

}  // namespace summon::client
