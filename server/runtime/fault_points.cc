#include "server/runtime/fault_points.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>

#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

const std::string& EnvOnce(const char* name) {
  const char* value = std::getenv(name);
  return *new std::string(value == nullptr ? "" : value);
}

void Fire(absl::string_view point, const std::string& action) {
  const bool stop = action == "stop";
  spdlog::critical("fault point {} reached: {}", std::string(point),
                   stop ? "SIGSTOP" : "SIGKILL");
  spdlog::default_logger()->flush();
  std::raise(stop ? SIGSTOP : SIGKILL);
}

}  // namespace

void FaultPoint(absl::string_view point) {
  static const std::string& armed = EnvOnce("SUMMON_FAULT_POINT");
  static const std::string& file = EnvOnce("SUMMON_FAULT_FILE");
  if (!armed.empty() && point == armed) Fire(point, "kill");
  if (file.empty()) return;
  std::ifstream in(file);
  std::string at, action;
  if (!(in >> at >> action) || point != at) return;
  // Removed first: the point fires once, and a restarted daemon (same
  // environment) is not armed again.
  if (unlink(file.c_str()) != 0) return;  // Another thread fired it.
  Fire(point, action);
}

bool FenceBroken(absl::string_view fence) {
  static const std::string& broken = EnvOnce("SUMMON_BROKEN_FENCE");
  if (broken.empty() || fence != broken) return false;
  spdlog::critical("fence {} is broken on purpose (SUMMON_BROKEN_FENCE)",
                   std::string(fence));
  return true;
}

}  // namespace summon::server
