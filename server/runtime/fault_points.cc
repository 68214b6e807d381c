#include "server/runtime/fault_points.h"

#include <csignal>
#include <cstdlib>
#include <string>

#include "spdlog/spdlog.h"

namespace summon::server {

void FaultPoint(absl::string_view point) {
  static const std::string* const armed = [] {
    const char* value = std::getenv("SUMMON_FAULT_POINT");
    return new std::string(value == nullptr ? "" : value);
  }();
  if (armed->empty() || point != *armed) return;
  spdlog::critical("fault point {} reached: SIGKILL", *armed);
  spdlog::default_logger()->flush();
  std::raise(SIGKILL);
}

}  // namespace summon::server
