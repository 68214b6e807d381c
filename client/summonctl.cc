// summonctl: the command-line client of summond. See summonctl_commands.h.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/summonctl_commands.h"
#include "client/lib/summon_client.h"

int main(int argc, char** argv) {
  // summonctl streams tensors of any size through gRPC's receive buffers.
  summon::client::TuneAllocatorForTensorStreams();
  const char* server = std::getenv(summon::client::kServerEnvironmentVariable);
  return summon::client::RunSummonctl(
      std::vector<std::string>(argv + 1, argv + argc),
      server == nullptr ? "" : server, std::cout, std::cerr);
}
