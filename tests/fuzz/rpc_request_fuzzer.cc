// Fuzzes request validation of every Summon and Trainer RPC (the cluster's
// status included), and of the
// Peer calls a node answers for watches (NodeWatchPartials and the watch
// copies' NodeWatchVersions/Fetch/Apply), against a real single-node daemon
// in this process: the registry, session manager, watch store and services
// summond runs, served by a grpc::Server without listeners and called
// through its in-process channel.
//
// Input: frames of [rpc: 1 byte][length: 2 bytes, little endian][payload],
// the payload a serialized request of the RPC the first byte picks
// (modulo kRpcCount). Consecutive WriteTensor frames are the messages of one
// client stream. Every input starts from one model, "m" (two units, a tied
// alias, grads on rank 1 of 2), and ends with every session aborted and
// every model deleted, so inputs do not depend on each other.
//
// Fixed up before sending, so that inputs reach deep and stay safe:
//  - an empty session id names the session the input opened last;
//  - checkpoint paths are reduced to one [A-Za-z0-9._-] name inside a
//    private temporary directory (the daemon would read or write anywhere);
//  - CreateModel layouts over kMaxModelBytes are not sent (the shards would
//    be allocated and filled);
//  - ReportPhase waits at most kMaxPhaseWaitMs;
//  - a read stream is cancelled after kMaxReadChunks chunks;
//  - Peer requests carry the node's epoch (0, never formed), so a mutated
//    epoch does not stop inputs at the fence (cluster_fence_test tests it).
// Failures besides the sanitizers': a status of UNKNOWN (a handler threw or
// mapped an error to nothing), and anything left after the cleanup —
// sessions, session memory, models or shared-memory segments.
//
// This file holds libFuzzer's entry points; rpc_fuzz_frames.{h,cc} the
// input's frames, the RPC numbers and the fix-ups above; rpc_fuzz_daemon.cc
// the daemon, what each RPC's frame sends and the cleanup.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/rpc_fuzz_daemon.h"
#include "tests/fuzz/rpc_fuzz_frames.h"

namespace {

std::unique_ptr<summon::fuzz::FuzzDaemon> daemon_under_test;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A daemon logs every model and session; at fuzzing speed that is noise.
  // So are protobuf's complaints about the fuzzer's invalid UTF-8.
  if (!summon::fuzz::Verbose()) {
    spdlog::set_level(spdlog::level::warn);
    google::protobuf::SetLogHandler(nullptr);
  }
  daemon_under_test = summon::fuzz::StartFuzzDaemon();
  // libFuzzer leaves through exit(): shut the daemon down there so no shared
  // memory outlives the process.
  std::atexit([] { daemon_under_test.reset(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  daemon_under_test->Run(summon::fuzz::SplitFrames(data, size));
  return 0;
}
