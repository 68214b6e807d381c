#ifndef SUMMON_CLIENT_CLI_CLI_PARSER_H_
#define SUMMON_CLIENT_CLI_CLI_PARSER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::client {

// A command line "TOOL [global flags] NOUN VERB POSITIONAL... [flags]" parsed
// against a table of CommandSpecs: the table says which positionals and flags
// each verb takes, so adding a verb is adding a row.

struct CommandContext;
using CommandHandler = absl::Status (*)(const CommandContext& context);

struct FlagSpec {
  // Without the leading "--".
  absl::string_view name;
  // Empty: a switch taking no value. Otherwise the value's name for usage.
  absl::string_view value_name;
  bool required = false;
  // Another flag (without "--") this one means nothing without: giving this
  // one alone is a usage error. Empty: none.
  absl::string_view only_with;
  // Another flag this one contradicts: giving both is a usage error.
  // Empty: none.
  absl::string_view conflicts_with;
  // One sentence for `help NOUN VERB`.
  absl::string_view help = "";
};

struct CommandSpec {
  absl::string_view noun;
  absl::string_view verb;
  // Required positionals, by their usage names.
  std::vector<absl::string_view> positionals;
  // Optional trailing positionals: one ("[M]") or, with repeated, any number
  // ("[FQN...]"). Empty: none.
  absl::string_view optional_positional;
  bool repeated = false;
  std::vector<FlagSpec> flags;
  CommandHandler handler = nullptr;
};

struct Invocation {
  // Null when the command line asked for help.
  const CommandSpec* command = nullptr;
  // Required positionals, then optional ones.
  std::vector<std::string> positionals;
  // Flags given, global and command ones; switches map to "".
  std::map<std::string, std::string, std::less<>> flags;

  bool Has(absl::string_view flag) const;
  // The flag's value; nullopt when not given.
  std::optional<std::string> Get(absl::string_view flag) const;
  // The value of a flag given or required (empty when absent).
  const std::string& Value(absl::string_view flag) const;
  // Positionals after the required ones.
  std::vector<std::string> OptionalPositionals() const;
};

// Parses `args` (without the program name). Global flags are accepted
// anywhere, the command's flags after its verb; "--flag value" and
// "--flag=value" are both accepted; "--help" anywhere gives an Invocation
// without command. Errors (unknown noun, verb or flag, a missing positional,
// value or required flag, a flag given twice, a flag given without the flag
// it is only_with, two flags that conflict, a surplus argument) are
// INVALID_ARGUMENT whose message ends with a usage line; an unknown noun, verb
// or flag close to a known one (at most two edits) says "did you mean ...?".
absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, absl::string_view program,
    const std::vector<FlagSpec>& global_flags,
    const std::vector<CommandSpec>& commands);

// " (did you mean 'x'?)" for the candidate closest to `given` within two
// edits (one in four characters of a longer name), else "".
std::string DidYouMean(absl::string_view given,
                       const std::vector<std::string>& candidates);

// "summonctl tensor read ID FQN --out FILE.npy [--grad] [--dtype D]".
std::string UsageLine(absl::string_view program, const CommandSpec& command);
// The global flags' line, then every command's usage line.
std::string Usage(absl::string_view program,
                  const std::vector<FlagSpec>& global_flags,
                  const std::vector<CommandSpec>& commands);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_CLI_PARSER_H_
