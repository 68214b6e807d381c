#ifndef SUMMON_CLIENT_CLI_SUMMONCTL_COMMANDS_H_
#define SUMMON_CLIENT_CLI_SUMMONCTL_COMMANDS_H_

#include <iostream>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_parser.h"
#include "client/cli/summonctl_context.h"
#include "client/lib/summon_client.h"
#include "summon/v1/types.pb.h"

namespace summon::client {

// summonctl: kubectl-style control of a summond (docs/api.md section 3).
//
//   summonctl [--server ADDR] [--output table|json] [--principal P] NOUN VERB
//
// The server is --server, else $SUMMON_SERVER, else kDefaultServer. Exit
// code: the gRPC status code number (0 = OK); a failure prints
// "ERROR <STATUS_NAME>: message" on stderr, a usage error (INVALID_ARGUMENT,
// 3) a usage line after it.

inline constexpr char kDefaultServer[] = "127.0.0.1:7070";
inline constexpr char kServerEnvironmentVariable[] = "SUMMON_SERVER";

const std::vector<FlagSpec>& SummonctlGlobalFlags();
const std::vector<CommandSpec>& SummonctlCommands();

// `args` without the program name; `environment_server` is $SUMMON_SERVER
// ("" when unset). Returns the exit code.
int RunSummonctl(const std::vector<std::string>& args,
                 absl::string_view environment_server, std::ostream& out,
                 std::ostream& err, std::istream& in = std::cin);

// The lease `session open` asks for without --lease: 10 minutes, long enough
// for a person typing commands (summonctl does not renew; the daemon's own
// default is 60 s).
inline constexpr uint32_t kCliSessionLeaseSeconds = 600;

// The SessionOptions that `session open`'s flags ask for (the lease
// kCliSessionLeaseSeconds unless --lease gives one). INVALID_ARGUMENT for
// contradictory flags (--params with --scope or --no-recurse) or bad values.
absl::StatusOr<v1::SessionOptions> SessionOptionsFromFlags(
    const Invocation& args);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_SUMMONCTL_COMMANDS_H_
