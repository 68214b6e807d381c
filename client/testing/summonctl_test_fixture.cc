#include "client/testing/summonctl_test_fixture.h"

#include <cstdlib>
#include <sstream>

#include "client/cli/summonctl_commands.h"

namespace summon::client {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

v1::TensorInfo TensorOf(const std::string& fqn, v1::DType dtype,
                        std::vector<int64_t> shape) {
  v1::TensorInfo info;
  info.set_fqn(fqn);
  info.set_dtype(dtype);
  int64_t numel = 1;
  for (int64_t dim : shape) {
    info.add_shape(dim);
    numel *= dim;
  }
  info.set_numel(numel);
  return info;
}

SummonctlResult SummonctlTest::Run(std::vector<std::string> args,
                                   const std::string& stdin_bytes) {
  args.insert(args.begin(), {"--server", server_.address()});
  return RunWithEnvironment(args, "", stdin_bytes);
}

SummonctlResult SummonctlTest::RunWithEnvironment(
    const std::vector<std::string>& args, const std::string& environment_server,
    const std::string& stdin_bytes) {
  std::ostringstream out, err;
  std::istringstream in(stdin_bytes);
  const int code = RunSummonctl(args, environment_server, out, err, in);
  return {code, out.str(), err.str()};
}

}  // namespace summon::client
