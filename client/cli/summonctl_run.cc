// RunSummonctl: summonctl's command line from start to exit code (the
// commands themselves are in summonctl_commands.cc and summonctl_tensors.cc).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/summonctl_commands.h"
#include "client/cli/summonctl_internal.h"
#include "client/cli/summonctl_meta.h"
#include "client/cli/summonctl_terminal.h"
#include "client/files/npy.h"

namespace summon::client {
namespace {

constexpr absl::string_view kProgram = "summonctl";

}  // namespace

namespace {

// How summonctl reaches the daemon: TLS as soon as a CA, a client
// certificate or a token is given (a token never crosses in the clear).
// A file that cannot be read is a local input error (exit 66).
absl::StatusOr<ClientOptions> ClientOptionsFrom(const Invocation& invocation) {
  ClientOptions options;
  options.principal = invocation.Value("principal");
  std::string token_file = invocation.Value("token-file");
  if (token_file.empty()) {
    const char* environment = std::getenv("SUMMON_TOKEN_FILE");
    if (environment != nullptr) token_file = environment;
  }
  const std::pair<const char*, std::string*> files[] = {
      {"tls-ca", &options.tls_root_certs},
      {"tls-cert", &options.tls_cert_chain},
      {"tls-key", &options.tls_private_key},
      {"token-file", &options.token}};
  for (const auto& [flag, value] : files) {
    const std::string path = absl::string_view(flag) == "token-file"
                                 ? token_file
                                 : invocation.Value(flag);
    if (path.empty()) continue;
    absl::StatusOr<std::string> text = ReadFileToString(path);
    if (!text.ok()) {
      return LocalFileError(
          absl::Status(text.status().code(),
                       absl::StrCat("--", flag, ": ", text.status().message())),
          /*input=*/true);
    }
    *value = std::move(*text);
    options.tls = true;
  }
  // A token file's first line, without the newline editors add.
  options.token = std::string(absl::StripAsciiWhitespace(
      absl::string_view(options.token).substr(0, options.token.find('\n'))));
  if (options.tls_cert_chain.empty() != options.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both or neither");
  }
  return options;
}

}  // namespace

int RunSummonctl(const std::vector<std::string>& raw_args,
                 absl::string_view environment_server, std::ostream& out,
                 std::ostream& err, std::istream& in) {
  const std::vector<std::string> args = ExpandShortFlags(raw_args);
  const absl::StatusOr<OutputFormat> format = OutputFormatOf(args);
  if (!format.ok()) return Fail(err, format.status()).raw_code();
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    out << VersionText();
    return 0;
  }
  // help and completion may follow the global flags.
  size_t first = 0;
  while (first < args.size() && absl::StartsWith(args[first], "--")) {
    bool valued = false;
    for (const FlagSpec& global : SummonctlGlobalFlags()) {
      valued = valued || (args[first] == absl::StrCat("--", global.name) &&
                          !global.value_name.empty());
    }
    first += valued ? 2 : 1;
  }
  if (first < args.size() &&
      (args[first] == "help" || args[first] == "completion")) {
    const std::vector<std::string> rest(args.begin() + first + 1, args.end());
    absl::StatusOr<std::string> text =
        args[first] == "help" ? HelpText(rest)
        : rest.size() == 1    ? CompletionScript(rest[0])
                              : absl::InvalidArgumentError(
                                    "usage: summonctl completion bash|zsh");
    if (!text.ok()) return Fail(err, text.status(), *format).raw_code();
    out << *text;
    return 0;
  }
  // NOUN [VERB] -h (--help): that noun's or verb's help, as `summonctl help
  // NOUN VERB` prints it, not the global usage.
  if (const auto help = std::find(args.begin() + first, args.end(), "--help");
      help != args.end()) {
    std::vector<std::string> words;
    for (auto word = args.begin() + first; word != help && words.size() < 2 &&
                                           !absl::StartsWith(*word, "-");
         ++word) {
      words.push_back(*word);
    }
    if (!words.empty()) {
      absl::StatusOr<std::string> text = HelpText(words);
      if (!text.ok()) return Fail(err, text.status(), *format).raw_code();
      out << *text;
      return 0;
    }
  }
  if (first < args.size() && args[first] == "__complete") {
    // The completion script's questions to the daemon: the global flags as
    // given, quickly, and silently.
    std::vector<std::string> globals(args.begin(), args.begin() + first);
    globals.insert(globals.end(), {"model", "list"});
    const absl::StatusOr<Invocation> global = ParseCommandLine(
        globals, kProgram, SummonctlGlobalFlags(), SummonctlCommands());
    if (!global.ok()) return 0;
    absl::StatusOr<ClientOptions> options = ClientOptionsFrom(*global);
    if (!options.ok()) return 0;
    options->timeout = absl::Seconds(2);
    const SummonClient client(global->Has("server") ? global->Value("server")
                              : environment_server.empty()
                                  ? std::string(kDefaultServer)
                                  : std::string(environment_server),
                              *options);
    return RunDaemonCompletion(
        std::vector<std::string>(args.begin() + first + 1, args.end()), client,
        out);
  }
  const absl::StatusOr<Invocation> invocation = ParseCommandLine(
      args, kProgram, SummonctlGlobalFlags(), SummonctlCommands());
  if (!invocation.ok()) {
    return Fail(err, invocation.status(), *format).raw_code();
  }
  if (invocation->command == nullptr) {
    out << "usage: "
        << Usage(kProgram, SummonctlGlobalFlags(), SummonctlCommands())
        << "\n\nThe server is --server, else $" << kServerEnvironmentVariable
        << ", else " << kDefaultServer << ". The exit code is the gRPC status "
        << "code (0 = OK). Also: summonctl help [NOUN [VERB]], summonctl "
        << "completion bash|zsh, summonctl --version.\n";
    return 0;
  }
  std::string server(environment_server.empty() ? kDefaultServer
                                                : environment_server);
  if (invocation->Has("server")) server = invocation->Value("server");
  if (absl::Status address = CheckServerAddress(
          server, invocation->Has("server")
                      ? "--server"
                      : absl::StrCat("$", kServerEnvironmentVariable));
      !address.ok()) {
    return ExitCodeOf(Fail(err, address, *format));
  }
  absl::StatusOr<ClientOptions> options = ClientOptionsFrom(*invocation);
  if (!options.ok()) return ExitCodeOf(Fail(err, options.status(), *format));
  const SummonClient client(server, *options);
  // The progress line only where a person watches: stderr is a terminal.
  const bool progress = !invocation->Has("quiet") && &err == &std::cerr &&
                        isatty(STDERR_FILENO) == 1;
  const CommandContext context{*invocation, client, *format, out,
                               err,         in,     progress};
  const absl::Status status =
      WithHints(context, invocation->command->handler(context));
  return status.ok() ? 0 : ExitCodeOf(Fail(err, status, *format));
}

}  // namespace summon::client
