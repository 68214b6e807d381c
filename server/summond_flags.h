#ifndef SUMMON_SERVER_SUMMOND_FLAGS_H_
#define SUMMON_SERVER_SUMMOND_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace summon::server {

// summond's flags as the user typed them, vetted before Abseil parses them
// (Abseil would name an unknown or badly valued flag with underscores and
// no suggestion, and exit 1): an unknown flag is refused with the closest
// known one ("unknown flag --local-rnaks; did you mean --local-ranks?"), a
// bad value or a missing one names the flag with dashes. `args` is argv
// (args[0] the program); flags defined in `main_file` are checked, Abseil's
// own (--help, --version, --flagfile, ...) pass through. INVALID_ARGUMENT.
absl::Status CheckFlagArgs(const std::vector<std::string>& args,
                           absl::string_view main_file);

// INVALID_ARGUMENT unless a TCP listener's HOST:PORT names its port: gRPC
// would listen on "HOST" alone at its default port, 443, silently. Port 0
// (a free one) is fine; empty (no listener) too.
absl::Status CheckPortNamed(absl::string_view flag, absl::string_view address);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SUMMOND_FLAGS_H_
