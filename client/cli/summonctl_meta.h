#ifndef SUMMON_CLIENT_CLI_SUMMONCTL_META_H_
#define SUMMON_CLIENT_CLI_SUMMONCTL_META_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace summon::client {

// summonctl about itself, from the same command table it parses with:
// `help [NOUN [VERB]]`, `completion bash|zsh` and `--version`.

// "summonctl 0.1.0 (API summon.v1)", the version from the repository's
// VERSION file (//:version).
std::string VersionText();

// Usage of every command, of one noun's commands, or of one command;
// INVALID_ARGUMENT naming an unknown noun or verb (with a suggestion).
absl::StatusOr<std::string> HelpText(const std::vector<std::string>& words);

// A completion script for `shell` ("bash" or "zsh"): nouns, then the noun's
// verbs, then the command's flags and the global ones.
absl::StatusOr<std::string> CompletionScript(absl::string_view shell);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_SUMMONCTL_META_H_
