#ifndef SUMMON_SERVER_AUTH_AUDIT_LOG_H_
#define SUMMON_SERVER_AUTH_AUDIT_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace summon::server::auth {

// One audited call: who did what to which model, and how it ended.
struct AuditEvent {
  std::string principal;
  std::string action;  // the RPC's name, e.g. "WriteTensor"
  std::string model;
  std::string scope;  // session id, tensor, checkpoint path: what it touched
  int64_t bytes = 0;
  absl::Status result;
};

// Appends events as JSON lines ({"time","principal","action","model",
// "scope","bytes","result","message"}) to a file opened O_APPEND, one
// write(2) per event so concurrent writers never interleave, and logs each
// through spdlog. Without a file: spdlog only.
class AuditLog {
 public:
  // `path` empty: spdlog only.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(
      const std::string& path);
  ~AuditLog();

  void Record(const AuditEvent& event);
  const std::string& path() const { return path_; }

 private:
  AuditLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
};

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_AUDIT_LOG_H_
