#ifndef SUMMON_SERVER_MODEL_DATA_DIR_LOCK_H_
#define SUMMON_SERVER_MODEL_DATA_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace summon::server {

// One summond per --data-dir: two daemons on one data dir would both
// re-attach its models and take over each other's shards. The holder keeps
// an exclusive flock(2) on <data-dir>/summond.lock (its pid written inside,
// for the refusal's message) for as long as it lives. The kernel drops the
// lock when the process dies, however it dies, so a crashed daemon never
// leaves the data dir locked; the stale pid in the file means nothing then.
class DataDirLock {
 public:
  // The lock file's name inside the data dir.
  static constexpr char kFileName[] = "summond.lock";

  // Creates the data dir when missing and takes its lock.
  // FAILED_PRECONDITION "data dir D in use by pid N" while another daemon
  // (another process, or another server in this one) holds it; UNAVAILABLE
  // when the lock file cannot be made.
  static absl::StatusOr<std::unique_ptr<DataDirLock>> Acquire(
      const std::string& data_dir);

  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;
  // Releases the lock (the file stays: removing it would race a daemon
  // that just opened it).
  ~DataDirLock();

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}

  const int fd_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_MODEL_DATA_DIR_LOCK_H_
