#include "server/auth/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace summon::server::auth {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(
    const std::string& path) {
  int fd = -1;
  if (!path.empty()) {
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot open the audit log ", path, ": ", std::strerror(errno)));
    }
  }
  return absl::WrapUnique(new AuditLog(path, fd));
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) close(fd_);
}

void AuditLog::Record(const AuditEvent& event) {
  const std::string result =
      event.result.ok() ? "OK" : absl::StatusCodeToString(event.result.code());
  spdlog::info("audit principal={} action={} model={} scope={} bytes={} {}",
               event.principal, event.action, event.model, event.scope,
               event.bytes, result);
  if (fd_ < 0) return;
  nlohmann::json line = {
      {"time",
       absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone())},
      {"principal", event.principal},
      {"action", event.action},
      {"model", event.model},
      {"scope", event.scope},
      {"bytes", event.bytes},
      {"result", result},
  };
  if (!event.result.ok()) {
    line["message"] = std::string(event.result.message());
  }
  // Principals and model names come from callers: replace, never throw.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  if (write(fd_, text.data(), text.size()) !=
      static_cast<ssize_t>(text.size())) {
    spdlog::warn("audit log {}: short write: {}", path_, std::strerror(errno));
  }
}

}  // namespace summon::server::auth
