#include "client/summonctl_meta.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli_parser.h"
#include "client/summonctl_commands.h"

namespace summon::client {
namespace {

constexpr absl::string_view kProgram = "summonctl";

std::string FlagWords(const std::vector<FlagSpec>& flags) {
  std::vector<std::string> words;
  for (const FlagSpec& flag : flags)
    words.push_back(absl::StrCat("--", flag.name));
  return absl::StrJoin(words, " ");
}

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
  return absl::StrCat(kProgram, " ", kSummonctlVersion, " (API summon.v1)\n");
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

absl::StatusOr<std::string> CompletionScript(absl::string_view shell) {
  if (shell != "bash" && shell != "zsh") {
    return absl::InvalidArgumentError(
        absl::StrCat("completion: '", shell, "' is neither bash nor zsh"));
  }
  const std::vector<CommandSpec>& commands = SummonctlCommands();
  std::set<std::string> nouns = {"help", "completion"};
  for (const CommandSpec& command : commands) nouns.emplace(command.noun);
  std::string verbs_case;
  std::set<std::string> seen;
  for (const CommandSpec& command : commands) {
    if (!seen.insert(std::string(command.noun)).second) continue;
    std::vector<std::string> verbs;
    for (const CommandSpec& other : commands) {
      if (other.noun == command.noun) verbs.emplace_back(other.verb);
    }
    absl::StrAppend(&verbs_case, "    ", command.noun, ") words=\"",
                    absl::StrJoin(verbs, " "), "\" ;;\n");
  }
  std::string flags_case;
  for (const CommandSpec& command : commands) {
    absl::StrAppend(&flags_case, "    \"", command.noun, " ", command.verb,
                    "\") words=\"", FlagWords(command.flags), "\" ;;\n");
  }
  std::string script;
  if (shell == "zsh") {
    script = "autoload -U +X bashcompinit && bashcompinit\n";
  }
  absl::StrAppend(
      &script, "# summonctl completion for ", shell,
      ": eval \"$(summonctl completion ", shell, ")\"\n", "_summonctl() {\n",
      "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" words=\"\" i noun=\"\" "
      "verb=\"\"\n",
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n",
      "    case \"${COMP_WORDS[i]}\" in\n", "      -*) ;;\n",
      "      *) if [[ -z $noun ]]; then noun=${COMP_WORDS[i]}; "
      "elif [[ -z $verb ]]; then verb=${COMP_WORDS[i]}; fi ;;\n",
      "    esac\n", "  done\n", "  if [[ $cur == -* ]]; then\n",
      "    case \"$noun $verb\" in\n", flags_case, "    esac\n",
      "    words=\"$words ", FlagWords(SummonctlGlobalFlags()),
      " --help --version\"\n", "  elif [[ -z $noun ]]; then\n", "    words=\"",
      absl::StrJoin(nouns, " "), "\"\n", "  elif [[ -z $verb ]]; then\n",
      "    case \"$noun\" in\n", verbs_case,
      "      completion) words=\"bash zsh\" ;;\n", "    esac\n", "  fi\n",
      "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n", "}\n",
      "complete -F _summonctl summonctl\n");
  return script;
}

}  // namespace summon::client
