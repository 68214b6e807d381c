#ifndef SUMMON_CLIENT_LIB_STREAM_WATCHDOG_H_
#define SUMMON_CLIENT_LIB_STREAM_WATCHDOG_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace summon::client {

// A tensor stream has no overall deadline (a large tensor may take longer
// than any fixed one); instead it is cancelled when no chunk moved for
// `idle`. Progress() is called for every chunk; fired() says whether the
// watchdog cancelled the call.
class StreamWatchdog {
 public:
  StreamWatchdog(grpc::ClientContext* context, absl::Duration idle);
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;
  ~StreamWatchdog();  // Stops watching.

  void Progress();
  bool fired() const;

 private:
  void Watch();

  grpc::ClientContext* const context_;
  const absl::Duration idle_;
  mutable absl::Mutex mu_;
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_LIB_STREAM_WATCHDOG_H_
