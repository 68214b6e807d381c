#ifndef SUMMON_TESTS_FUZZ_RPC_FUZZ_DAEMON_H_
#define SUMMON_TESTS_FUZZ_RPC_FUZZ_DAEMON_H_

// The daemon the RPC fuzzer calls: a real single-node summond's registry,
// session manager, trainer leases, watch store and services in this process,
// served by a grpc::Server without listeners and called through its
// in-process channel (rpc_request_fuzzer.cc says what an input does).

#include <memory>
#include <vector>

#include "tests/fuzz/rpc_fuzz_frames.h"

namespace summon::fuzz {

class FuzzDaemon {
 public:
  virtual ~FuzzDaemon() = default;
  // Creates the base model "m", sends `frames` (consecutive WriteTensor
  // frames as one stream), then aborts every session and deletes every
  // model, failing (Fail) on whatever survives that.
  virtual void Run(const std::vector<Frame>& frames) = 0;
};

// Unlinks every model's shared memory when destroyed (no data dir).
std::unique_ptr<FuzzDaemon> StartFuzzDaemon();

}  // namespace summon::fuzz

#endif  // SUMMON_TESTS_FUZZ_RPC_FUZZ_DAEMON_H_
