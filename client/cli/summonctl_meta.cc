#include "client/cli/summonctl_meta.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_parser.h"
#include "client/cli/summonctl_commands.h"
#include "version.h"

namespace summon::client {
namespace {

constexpr absl::string_view kProgram = "summonctl";

// "\nTITLE:\n  --flag VALUE  sentence\n..." with the sentences aligned; ""
// without flags.
std::string FlagHelp(absl::string_view title,
                     const std::vector<FlagSpec>& flags) {
  if (flags.empty()) return "";
  std::vector<std::string> names;
  size_t width = 0;
  for (const FlagSpec& flag : flags) {
    names.push_back(absl::StrCat(
        "--", flag.name, flag.value_name.empty() ? "" : " ", flag.value_name));
    width = std::max(width, names.back().size());
  }
  std::string text = absl::StrCat("\n", title, ":\n");
  for (size_t i = 0; i < flags.size(); ++i) {
    absl::StrAppend(
        &text, "  ", names[i], std::string(width - names[i].size() + 2, ' '),
        flags[i].help, flags[i].required ? " (required)" : "", "\n");
  }
  return text;
}

}  // namespace

std::string VersionText() {
  return absl::StrCat(kProgram, " ", summon::kVersion, " (API summon.v1)\n");
}

absl::StatusOr<std::string> HelpText(const std::vector<std::string>& words) {
  const std::vector<CommandSpec>& commands = SummonctlCommands();
  if (words.empty()) {
    return absl::StrCat(
        "usage: ", Usage(kProgram, SummonctlGlobalFlags(), commands), "\n");
  }
  // The parser names an unknown noun or verb (and suggests one); a known
  // noun alone, or a known command, is then listed here.
  std::vector<std::string> probe = {words[0], words.size() > 1 ? words[1] : ""};
  if (words.size() > 2) {
    return absl::InvalidArgumentError("help takes at most NOUN VERB");
  }
  std::string text;
  for (const CommandSpec& command : commands) {
    if (command.noun == words[0] &&
        (words.size() == 1 || command.verb == words[1])) {
      absl::StrAppend(&text, UsageLine(kProgram, command), "\n");
      if (words.size() == 2) {
        absl::StrAppend(&text, FlagHelp("flags", command.flags),
                        FlagHelp("global flags", SummonctlGlobalFlags()));
      }
    }
  }
  if (!text.empty()) return text;
  if (probe[1].empty()) probe.pop_back();
  const absl::Status unknown =
      ParseCommandLine(probe, kProgram, SummonctlGlobalFlags(), commands)
          .status();
  return absl::InvalidArgumentError(unknown.ok() ? "unknown command"
                                                 : unknown.message());
}

}  // namespace summon::client
