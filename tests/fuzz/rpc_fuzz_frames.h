#ifndef SUMMON_TESTS_FUZZ_RPC_FUZZ_FRAMES_H_
#define SUMMON_TESTS_FUZZ_RPC_FUZZ_FRAMES_H_

// The RPC fuzzer's input and its safety rules (rpc_request_fuzzer.cc says
// what the fuzzer does): the frames an input splits into, the RPC each
// names, the fix-ups that keep requests inside the sandbox, and the failure
// checks.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "summon/v1/summon.pb.h"

namespace summon::fuzz {

namespace v1 = summon::v1;

enum class Rpc : uint8_t {
  kCreateModel,
  kDescribeModel,
  kListModels,
  kLoadModel,
  kSaveModel,
  kModelChecksum,
  kDeleteModel,
  kOpenSession,
  kGetSession,
  kListSessions,
  kRenewSession,
  kCloseSession,
  kReadTensor,
  kWriteTensor,
  kTensorStats,
  kReportPhase,
  kMapShards,
  kAttach,
  kTrainerHeartbeat,
  kDetach,
  kMarkInitialized,
  kMapSession,
  // Issue 21's watches (appended: earlier seeds keep their meaning).
  kAddWatch,
  kListWatches,
  kRemoveWatch,
  kShowWatch,
  kNodeWatchPartials,
  kNodeWatchVersions,
  kNodeWatchFetch,
  kNodeWatchApply,
  // Issue 33's cluster status (appended likewise).
  kGetClusterStatus,  // Last.
};
constexpr int kRpcCount = static_cast<int>(Rpc::kGetClusterStatus) + 1;

constexpr int kMaxFrames = 32;
constexpr int64_t kMaxModelBytes = 256 << 10;
constexpr int kLocalRanks = 2;

struct Frame {
  Rpc rpc;
  absl::string_view payload;
};

// Frames of [rpc: 1 byte][length: 2 bytes, little endian][payload], at most
// kMaxFrames; a short tail is a frame with what is left.
std::vector<Frame> SplitFrames(const uint8_t* data, size_t size);

// This process's shared-memory instance and checkpoint directory.
std::string Instance();
std::filesystem::path CheckpointDirectory();

// Aborts (libFuzzer saves the input) without leaving shared memory or files
// behind; run_fuzzers.sh cleans up after sanitizer reports.
[[noreturn]] void Fail(const std::string& what);

// RPC_FUZZER_VERBOSE=1 prints every answer (to see what a seed reaches).
bool Verbose();

// Fails on UNKNOWN: a handler threw or mapped an error to nothing.
void CheckStatus(const grpc::Status& status, absl::string_view rpc);

// One file name inside the checkpoint directory: never "..", never a '/'.
std::string SandboxPath(const std::string& path);

// Layouts whose shards would take more than about kMaxModelBytes (as laid
// out by the file's own strategy) are not sent.
bool SmallEnough(const v1::CreateModelRequest& request);

template <typename Request>
bool Parse(absl::string_view payload, Request* request) {
  return request->ParseFromArray(payload.data(),
                                 static_cast<int>(payload.size()));
}

}  // namespace summon::fuzz

#endif  // SUMMON_TESTS_FUZZ_RPC_FUZZ_FRAMES_H_
