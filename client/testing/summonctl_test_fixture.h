#ifndef SUMMON_CLIENT_TESTING_SUMMONCTL_TEST_FIXTURE_H_
#define SUMMON_CLIENT_TESTING_SUMMONCTL_TEST_FIXTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/testing/fake_summon_service.h"
#include "gtest/gtest.h"
#include "summon/v1/types.pb.h"

namespace summon::client {

// What one summonctl run printed and returned.
struct SummonctlResult {
  int exit_code;
  std::string out;
  std::string err;
};

// `name` under the test's $TEST_TMPDIR.
std::string TempPath(const std::string& name);

// A TensorInfo with numel filled in from `shape`.
v1::TensorInfo TensorOf(const std::string& fqn, v1::DType dtype,
                        std::vector<int64_t> shape);

// Runs RunSummonctl in-process against fake Summon and Trainer services.
class SummonctlTest : public ::testing::Test {
 protected:
  // Runs summonctl against the fake server (through --server), with
  // `stdin_bytes` as its standard input.
  SummonctlResult Run(std::vector<std::string> args,
                      const std::string& stdin_bytes = "");
  static SummonctlResult RunWithEnvironment(
      const std::vector<std::string>& args,
      const std::string& environment_server,
      const std::string& stdin_bytes = "");

  FakeCalls& summon() { return server_.summon().calls(); }

  FakeSummonServer server_;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_TESTING_SUMMONCTL_TEST_FIXTURE_H_
