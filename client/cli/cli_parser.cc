#include "client/cli/cli_parser.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/closest_name.h"

namespace summon::client {
namespace {

// " (did you mean 'x'?)" for the closest candidate within `max_edits`
// edits, else "".
std::string Suggestion(absl::string_view given,
                       const std::vector<absl::string_view>& candidates,
                       absl::string_view prefix = "", size_t max_edits = 2) {
  absl::string_view best;
  size_t best_distance = max_edits + 1;
  for (absl::string_view candidate : candidates) {
    const size_t distance = core::EditDistance(given, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (best.empty()) return "";
  return absl::StrCat(" (did you mean '", prefix, best, "'?)");
}

const FlagSpec* FindFlag(const std::vector<FlagSpec>& flags,
                         absl::string_view name) {
  for (const FlagSpec& flag : flags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

std::string FlagUsage(const FlagSpec& flag) {
  std::string usage = absl::StrCat("--", flag.name);
  if (!flag.value_name.empty()) absl::StrAppend(&usage, " ", flag.value_name);
  return flag.required ? usage : absl::StrCat("[", usage, "]");
}

std::string GlobalUsage(absl::string_view program,
                        const std::vector<FlagSpec>& global_flags) {
  std::string usage(program);
  for (const FlagSpec& flag : global_flags) {
    absl::StrAppend(&usage, " ", FlagUsage(flag));
  }
  return absl::StrCat(usage, " NOUN VERB ...");
}

// The usage lines of every command, or of one noun's commands.
std::string CommandUsages(absl::string_view program,
                          const std::vector<CommandSpec>& commands,
                          absl::string_view only_noun) {
  std::string usage;
  for (const CommandSpec& command : commands) {
    if (only_noun.empty() || command.noun == only_noun) {
      absl::StrAppend(&usage, "\n  ", UsageLine(program, command));
    }
  }
  return usage;
}

bool HasNoun(const std::vector<CommandSpec>& commands, absl::string_view noun) {
  return std::any_of(
      commands.begin(), commands.end(),
      [noun](const CommandSpec& command) { return command.noun == noun; });
}

const CommandSpec* FindCommand(const std::vector<CommandSpec>& commands,
                               absl::string_view noun, absl::string_view verb) {
  for (const CommandSpec& command : commands) {
    if (command.noun == noun && command.verb == verb) return &command;
  }
  return nullptr;
}

class CommandLineParser {
 public:
  CommandLineParser(absl::string_view program,
                    const std::vector<FlagSpec>& global_flags,
                    const std::vector<CommandSpec>& commands)
      : program_(program), global_flags_(global_flags), commands_(commands) {}

  absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg == "--help") return Invocation();
      absl::Status status = absl::StartsWith(arg, "--") && arg.size() > 2
                                ? AddFlag(args, i)
                                : AddWord(arg);
      if (!status.ok()) return status;
    }
    if (words_.empty()) return UsageError("missing NOUN");
    if (words_.size() == 1) {
      return UsageError(absl::StrCat("missing VERB after '", words_[0], "'"));
    }
    return Finish();
  }

 private:
  absl::Status UsageError(absl::string_view problem) const {
    const std::string usage =
        invocation_.command != nullptr
            ? UsageLine(program_, *invocation_.command)
            : absl::StrCat(GlobalUsage(program_, global_flags_),
                           CommandUsages(program_, commands_, KnownNoun()));
    return absl::InvalidArgumentError(
        absl::StrCat(problem, "\nusage: ", usage));
  }

  // The noun given when it is one of the table's, else "".
  absl::string_view KnownNoun() const {
    if (words_.empty() || !HasNoun(commands_, words_[0])) return "";
    return words_[0];
  }

  // Takes the flag at args[i] and, for a valued flag written without '=',
  // the value after it.
  absl::Status AddFlag(const std::vector<std::string>& args, size_t& i) {
    const absl::string_view arg = args[i];
    const size_t equals = arg.find('=');
    const std::string name(arg.substr(2, equals - 2));
    const FlagSpec* flag = FindFlag(global_flags_, name);
    if (flag == nullptr && invocation_.command != nullptr) {
      flag = FindFlag(invocation_.command->flags, name);
    }
    if (flag == nullptr) {
      std::vector<absl::string_view> known;
      for (const FlagSpec& candidate : global_flags_) {
        known.push_back(candidate.name);
      }
      if (invocation_.command != nullptr) {
        for (const FlagSpec& candidate : invocation_.command->flags) {
          known.push_back(candidate.name);
        }
      }
      return UsageError(
          absl::StrCat("unknown flag --", name, Suggestion(name, known, "--")));
    }
    if (invocation_.flags.count(name) > 0) {
      return UsageError(absl::StrCat("flag --", name, " given twice"));
    }
    std::string value;
    if (flag->value_name.empty()) {
      if (equals != absl::string_view::npos) {
        return UsageError(absl::StrCat("flag --", name, " takes no value"));
      }
    } else if (equals != absl::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return UsageError(
          absl::StrCat("flag --", name, " needs a value ", flag->value_name));
    }
    invocation_.flags.emplace(name, std::move(value));
    return absl::OkStatus();
  }

  absl::Status AddWord(const std::string& word) {
    words_.push_back(word);
    if (words_.size() == 1 && !HasNoun(commands_, word)) {
      std::vector<absl::string_view> nouns;
      for (const CommandSpec& command : commands_)
        nouns.push_back(command.noun);
      return UsageError(
          absl::StrCat("unknown noun '", word, "'", Suggestion(word, nouns)));
    }
    if (words_.size() == 2) {
      invocation_.command = FindCommand(commands_, words_[0], word);
      if (invocation_.command == nullptr) {
        std::vector<absl::string_view> verbs;
        for (const CommandSpec& command : commands_) {
          if (command.noun == words_[0]) verbs.push_back(command.verb);
        }
        return UsageError(absl::StrCat("unknown verb '", word, "' for '",
                                       words_[0], "'",
                                       Suggestion(word, verbs)));
      }
    }
    if (words_.size() > 2) invocation_.positionals.push_back(word);
    return absl::OkStatus();
  }

  absl::StatusOr<Invocation> Finish() {
    const CommandSpec& command = *invocation_.command;
    const size_t given = invocation_.positionals.size();
    const size_t required = command.positionals.size();
    if (given < required) {
      return UsageError(
          absl::StrCat("missing argument ", command.positionals[given]));
    }
    const size_t optional = command.optional_positional.empty() ? 0
                            : command.repeated                  ? given
                                                                : 1;
    if (given > required + optional) {
      return UsageError(
          absl::StrCat("unexpected argument '",
                       invocation_.positionals[required + optional], "'"));
    }
    for (const FlagSpec& flag : command.flags) {
      if (flag.required && !invocation_.Has(flag.name)) {
        return UsageError(
            absl::StrCat("missing flag --", flag.name, " ", flag.value_name));
      }
      if (!flag.only_with.empty() && invocation_.Has(flag.name) &&
          !invocation_.Has(flag.only_with)) {
        return UsageError(
            absl::StrCat("flag --", flag.name, " needs --", flag.only_with));
      }
      if (!flag.conflicts_with.empty() && invocation_.Has(flag.name) &&
          invocation_.Has(flag.conflicts_with)) {
        return UsageError(absl::StrCat("flags --", flag.name, " and --",
                                       flag.conflicts_with,
                                       " contradict each other"));
      }
    }
    return std::move(invocation_);
  }

  const absl::string_view program_;
  const std::vector<FlagSpec>& global_flags_;
  const std::vector<CommandSpec>& commands_;
  std::vector<std::string> words_;
  Invocation invocation_;
};

}  // namespace

std::string DidYouMean(absl::string_view given,
                       const std::vector<std::string>& candidates) {
  const std::vector<absl::string_view> views(candidates.begin(),
                                             candidates.end());
  // Two edits, or one in four characters of a long name (FQNs).
  return Suggestion(given, views, "", std::max<size_t>(2, given.size() / 4));
}

bool Invocation::Has(absl::string_view flag) const {
  return flags.find(flag) != flags.end();
}

std::optional<std::string> Invocation::Get(absl::string_view flag) const {
  const auto it = flags.find(flag);
  if (it == flags.end()) return std::nullopt;
  return it->second;
}

const std::string& Invocation::Value(absl::string_view flag) const {
  static const std::string* const kEmpty = new std::string();
  const auto it = flags.find(flag);
  return it == flags.end() ? *kEmpty : it->second;
}

std::vector<std::string> Invocation::OptionalPositionals() const {
  const size_t required = command == nullptr ? 0 : command->positionals.size();
  return std::vector<std::string>(
      positionals.begin() +
          static_cast<std::ptrdiff_t>(std::min(required, positionals.size())),
      positionals.end());
}

absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, absl::string_view program,
    const std::vector<FlagSpec>& global_flags,
    const std::vector<CommandSpec>& commands) {
  return CommandLineParser(program, global_flags, commands).Parse(args);
}

std::string UsageLine(absl::string_view program, const CommandSpec& command) {
  std::string usage =
      absl::StrCat(program, " ", command.noun, " ", command.verb);
  for (absl::string_view positional : command.positionals) {
    absl::StrAppend(&usage, " ", positional);
  }
  if (!command.optional_positional.empty()) {
    absl::StrAppend(&usage, " [", command.optional_positional,
                    command.repeated ? "...]" : "]");
  }
  for (const FlagSpec& flag : command.flags) {
    absl::StrAppend(&usage, " ", FlagUsage(flag));
  }
  return usage;
}

std::string Usage(absl::string_view program,
                  const std::vector<FlagSpec>& global_flags,
                  const std::vector<CommandSpec>& commands) {
  return absl::StrCat(GlobalUsage(program, global_flags),
                      CommandUsages(program, commands, ""));
}

}  // namespace summon::client
