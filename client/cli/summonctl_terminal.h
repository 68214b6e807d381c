#ifndef SUMMON_CLIENT_CLI_SUMMONCTL_TERMINAL_H_
#define SUMMON_CLIENT_CLI_SUMMONCTL_TERMINAL_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/summonctl_context.h"

namespace summon::client {

// How summonctl meets its terminal and its caller's scripts: short flags,
// the output format, errors on stderr and exit codes.

// -o and -h are --output and --help.
std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args);

// The --output format, read before the command line is parsed so that even
// a usage error comes out in it. INVALID_ARGUMENT for an unknown format.
absl::StatusOr<OutputFormat> OutputFormatOf(
    const std::vector<std::string>& args);

// Prints the error on stderr in `format`: "ERROR NAME: message", or
// {"error": {"code", "codeNumber", "message"}} as JSON or YAML, with the
// exit code's name and number (ExitCodeName, ExitCodeOf). Returns it.
absl::Status Fail(std::ostream& err, const absl::Status& status,
                  OutputFormat format = OutputFormat::kTable);

// Local file errors exit with sysexits(3) codes, never a gRPC code: 66 an
// input file missing or unreadable, 65 an input file malformed, 73 an output
// file that cannot be written. `input` says which side the file is on.
absl::Status LocalFileError(const absl::Status& status, bool input);

// The process exit code for `status`: a local file error's own code, else
// the gRPC status code number.
int ExitCodeOf(const absl::Status& status);
// The name printed for that exit code: sysexits(3)'s without "EX_" for a
// local file error (DATAERR 65, NOINPUT 66, CANTCREAT 73), else the gRPC
// status code's name.
std::string ExitCodeName(const absl::Status& status);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_SUMMONCTL_TERMINAL_H_
