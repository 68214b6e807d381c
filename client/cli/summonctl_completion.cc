// `summonctl completion bash|zsh`: a completion script generated from the
// command table. It completes nouns, verbs, each verb's flags and the global
// ones, enum values, local file paths for file flags (--layout, --in, --out,
// the TLS and token files), and asks the daemon (`summonctl __complete`)
// for model names, session ids and FQNs, as kubectl does.

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/summonctl_commands.h"
#include "client/cli/summonctl_meta.h"

namespace summon::client {
namespace {

std::string FlagWords(const std::vector<FlagSpec>& flags) {
  std::vector<std::string> words;
  for (const FlagSpec& flag : flags) {
    words.push_back(absl::StrCat("--", flag.name));
  }
  return absl::StrJoin(words, " ");
}

// Flags whose value is a local file.
bool IsFileFlag(const FlagSpec& flag) {
  return absl::StrContains(flag.value_name, "FILE") ||
         absl::StrContains(flag.value_name, "PEM");
}

// Everything the script generates from the table, as bash case arms.
struct Arms {
  std::string verbs;        // noun) words="verb ...";;
  std::string flags;        // "noun verb") words="--flag ...";;
  std::string positionals;  // "noun verb") names="M ID FQN...";;
  std::set<std::string> valued;
  std::set<std::string> files;
};

Arms ArmsOf(const std::vector<CommandSpec>& commands) {
  Arms arms;
  std::set<std::string> seen;
  std::vector<FlagSpec> all = SummonctlGlobalFlags();
  for (const CommandSpec& command : commands) {
    all.insert(all.end(), command.flags.begin(), command.flags.end());
    absl::StrAppend(&arms.flags, "    \"", command.noun, " ", command.verb,
                    "\") words=\"", FlagWords(command.flags), "\" ;;\n");
    std::vector<std::string> names(command.positionals.begin(),
                                   command.positionals.end());
    if (!command.optional_positional.empty()) {
      names.push_back(absl::StrCat(command.optional_positional,
                                   command.repeated ? "..." : ""));
    }
    absl::StrAppend(&arms.positionals, "    \"", command.noun, " ",
                    command.verb, "\") names=(", absl::StrJoin(names, " "),
                    ") ;;\n");
    if (!seen.insert(std::string(command.noun)).second) continue;
    std::vector<std::string> verbs;
    for (const CommandSpec& other : commands) {
      if (other.noun == command.noun) verbs.emplace_back(other.verb);
    }
    absl::StrAppend(&arms.verbs, "      ", command.noun, ") words=\"",
                    absl::StrJoin(verbs, " "), "\" ;;\n");
  }
  for (const FlagSpec& flag : all) {
    if (flag.value_name.empty()) continue;
    arms.valued.insert(absl::StrCat("--", flag.name));
    if (IsFileFlag(flag)) arms.files.insert(absl::StrCat("--", flag.name));
  }
  return arms;
}

constexpr char kScript[] = R"script(_summonctl_daemon() {
  summonctl "${_summonctl_global[@]}" __complete "$@" 2>/dev/null
}
_summonctl() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="" words="" i w noun="" verb=""
  local -a pos=() names=()
  _summonctl_global=()
  ((COMP_CWORD > 1)) && prev="${COMP_WORDS[COMP_CWORD-1]}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$w" in
      --server|--principal|--tls-ca|--tls-cert|--tls-key|--token-file)
        _summonctl_global+=("$w" "${COMP_WORDS[i+1]}"); ((i++)) ;;
      @VALUED@) ((i++)) ;;
      -*) ;;
      *) if [[ -z $noun ]]; then noun=$w
         elif [[ -z $verb ]]; then verb=$w
         else pos+=("$w"); fi ;;
    esac
  done
  case "$prev" in
    @FILES@)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --strategy) words="full_shard shard_grad_op no_shard hybrid_shard hybrid_shard_zero2" ;;
    --dtype|--read-dtype) words="float32 float64 float16 bfloat16" ;;
    --output) words="table json yaml" ;;
    --init|--grad-init) words="zeros seeded: external" ;;
    --scope) words="$(_summonctl_daemon units "${pos[0]}")" ;;
    --params) words="$(_summonctl_daemon params "${pos[0]}")" ;;
    --session) words="$(_summonctl_daemon sessions)" ;;
    --format) words="npz safetensors" ;;
    @VALUED@) ;;
    *) prev="" ;;
  esac
  if [[ -n $prev ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    case "$noun $verb" in
@FLAGS@    esac
    words="$words @GLOBAL@ --help --version"
  elif [[ -z $noun ]]; then
    words="@NOUNS@"
  elif [[ -z $verb ]]; then
    case "$noun" in
@VERBS@      completion) words="bash zsh" ;;
      help) words="@NOUNS@" ;;
    esac
  else
    case "$noun $verb" in
@POSITIONALS@    esac
    local name="" last="${#names[@]}"
    ((${#pos[@]} < last)) && name="${names[${#pos[@]}]}"
    ((last > 0)) && [[ -z $name && ${names[last-1]} == *... ]] && name="${names[last-1]}"
    case "${name%...}" in
      M) words="$(_summonctl_daemon models)" ;;
      ID) words="$(_summonctl_daemon sessions)" ;;
      FQN) words="$(_summonctl_daemon fqns "${pos[0]}")" ;;
      PHASE) words="idle forward between backward optimizer" ;;
    esac
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _summonctl summonctl
)script";

}  // namespace

absl::StatusOr<std::string> CompletionScript(absl::string_view shell) {
  if (shell != "bash" && shell != "zsh") {
    return absl::InvalidArgumentError(
        absl::StrCat("completion: '", shell, "' is neither bash nor zsh"));
  }
  const std::vector<CommandSpec>& commands = SummonctlCommands();
  const Arms arms = ArmsOf(commands);
  std::set<std::string> nouns = {"help", "completion"};
  for (const CommandSpec& command : commands) nouns.emplace(command.noun);
  std::string body = kScript;
  const std::pair<std::string, std::string> fills[] = {
      {"@VALUED@", absl::StrJoin(arms.valued, "|")},
      {"@FILES@", absl::StrJoin(arms.files, "|")},
      {"@FLAGS@", arms.flags},
      {"@GLOBAL@", FlagWords(SummonctlGlobalFlags())},
      {"@NOUNS@", absl::StrJoin(nouns, " ")},
      {"@VERBS@", arms.verbs},
      {"@POSITIONALS@", arms.positionals},
  };
  for (const auto& [key, value] : fills) {
    for (size_t at; (at = body.find(key)) != std::string::npos;) {
      body.replace(at, key.size(), value);
    }
  }
  return absl::StrCat(
      shell == "zsh" ? "autoload -U +X bashcompinit && bashcompinit\n" : "",
      "# summonctl completion for ", shell, ": eval \"$(summonctl completion ",
      shell, ")\"\n", body);
}

}  // namespace summon::client
