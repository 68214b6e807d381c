#include "client/cli/summonctl_terminal.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli_output.h"
#include "nlohmann/json.hpp"

namespace summon::client {
namespace {

constexpr absl::string_view kExitCodePayload = "summonctl.exit-code";

}  // namespace

// Local file errors exit with sysexits(3) codes, never a gRPC code, so a
// script can tell "my file is missing" (66) from "the server's model is
// missing" (5): 66 an input file missing or unreadable, 65 an input file
// malformed, 73 an output file that cannot be written.

absl::Status LocalFileError(const absl::Status& status, bool input) {
  const int code =
      !input                                                         ? 73
      : absl::IsNotFound(status) || absl::IsPermissionDenied(status) ? 66
                                                                     : 65;
  absl::Status local = status;
  local.SetPayload(kExitCodePayload, absl::Cord(absl::StrCat(code)));
  return local;
}

int ExitCodeOf(const absl::Status& status) {
  const auto local = status.GetPayload(kExitCodePayload);
  int code = 0;
  if (local.has_value() && absl::SimpleAtoi(std::string(*local), &code)) {
    return code;
  }
  return status.raw_code();
}

std::string ExitCodeName(const absl::Status& status) {
  switch (ExitCodeOf(status)) {
    case 65:
      return "DATAERR";
    case 66:
      return "NOINPUT";
    case 73:
      return "CANTCREAT";
    default:
      return absl::StatusCodeToString(status.code());
  }
}

// Prints the error on stderr in the chosen format: "ERROR NAME: message", or
// {"error": {"code", "codeNumber", "message"}} as JSON or YAML, where NAME
// and the number are those of the exit code.
absl::Status Fail(std::ostream& err, const absl::Status& status,
                  OutputFormat format) {
  if (format == OutputFormat::kTable) {
    err << "ERROR " << ExitCodeName(status) << ": " << status.message() << "\n";
    return status;
  }
  const std::string json =
      nlohmann::ordered_json{{"error",
                              {{"code", ExitCodeName(status)},
                               {"codeNumber", ExitCodeOf(status)},
                               {"message", std::string(status.message())}}}}
          .dump(2) +
      "\n";
  err << (format == OutputFormat::kJson ? json : JsonToYaml(json));
  return status;
}

// -o and -h are --output and --help.
std::vector<std::string> ExpandShortFlags(
    const std::vector<std::string>& args) {
  std::vector<std::string> expanded;
  for (const std::string& arg : args) {
    expanded.push_back(arg == "-o" ? "--output" : arg == "-h" ? "--help" : arg);
  }
  return expanded;
}

// The --output format, read before the command line is parsed so that even
// a usage error comes out in it.
absl::StatusOr<OutputFormat> OutputFormatOf(
    const std::vector<std::string>& args) {
  std::string value;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--output" && i + 1 < args.size()) value = args[i + 1];
    if (absl::StartsWith(args[i], "--output=")) value = args[i].substr(9);
  }
  if (value.empty() || value == "table") return OutputFormat::kTable;
  if (value == "json") return OutputFormat::kJson;
  if (value == "yaml") return OutputFormat::kYaml;
  return absl::InvalidArgumentError(
      absl::StrCat("--output: '", value, "' is none of table, json and yaml"));
}

}  // namespace summon::client
