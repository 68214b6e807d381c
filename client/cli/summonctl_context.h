#ifndef SUMMON_CLIENT_CLI_SUMMONCTL_CONTEXT_H_
#define SUMMON_CLIENT_CLI_SUMMONCTL_CONTEXT_H_

// What every verb's handler and the terminal helpers share, apart from the
// command table (summonctl_commands.h), so that they need not include it.

#include <istream>
#include <ostream>

#include "client/cli/cli_parser.h"
#include "client/lib/summon_client.h"

namespace summon::client {

enum class OutputFormat { kTable, kJson, kYaml };

// What a command's handler works with.
struct CommandContext {
  const Invocation& args;
  const SummonClient& client;
  OutputFormat format;
  std::ostream& out;
  std::ostream& err;
  std::istream& in;  // `tensor write --in -` reads it.
  // Tensor transfers draw a progress line on `err` (a terminal, no --quiet).
  bool progress = false;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_SUMMONCTL_CONTEXT_H_
