#include "tests/fuzz/rpc_fuzz_frames.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/model_spec.h"
#include "server/store/shard_store.h"

namespace summon::fuzz {

std::vector<Frame> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<Frame> frames;
  size_t at = 0;
  while (at < size && static_cast<int>(frames.size()) < kMaxFrames) {
    const Rpc rpc = static_cast<Rpc>(data[at] % kRpcCount);
    size_t length = 0;
    if (at + 3 <= size) length = data[at + 1] | (size_t{data[at + 2]} << 8);
    at = std::min(at + 3, size);
    length = std::min(length, size - at);
    frames.push_back(
        {rpc,
         absl::string_view(reinterpret_cast<const char*>(data) + at, length)});
    at += length;
  }
  return frames;
}

std::string Instance() { return absl::StrCat("fuzz", getpid()); }
std::filesystem::path CheckpointDirectory() {
  return std::filesystem::temp_directory_path() /
         absl::StrCat("summon-rpc-fuzzer-", getpid());
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "rpc fuzzer: %s\n", what.c_str());
  for (const std::string& segment :
       summon::server::ShardStore::ListSegments(Instance())) {
    shm_unlink(segment.c_str());
  }
  std::error_code ignored;
  std::filesystem::remove_all(CheckpointDirectory(), ignored);
  std::abort();
}

bool Verbose() {
  static const bool verbose = std::getenv("RPC_FUZZER_VERBOSE") != nullptr;
  return verbose;
}

void CheckStatus(const grpc::Status& status, absl::string_view rpc) {
  if (Verbose()) {
    std::fprintf(stderr, "%.*s: %d %s\n", static_cast<int>(rpc.size()),
                 rpc.data(), status.error_code(),
                 status.error_message().c_str());
  }
  if (status.error_code() == grpc::StatusCode::UNKNOWN) {
    Fail(absl::StrCat(rpc, " answered UNKNOWN: ", status.error_message()));
  }
}

std::string SandboxPath(const std::string& path) {
  if (path.empty()) return "";  // Keeps "path must be set" reachable.
  std::string name;
  for (char c : path.substr(0, 64)) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
        c == '-') {
      name += c;
    }
  }
  if (name.find_first_not_of('.') == std::string::npos) return "ckpt" + name;
  return name;
}

bool SmallEnough(const v1::CreateModelRequest& request) {
  const absl::StatusOr<summon::core::ModelSpec> spec =
      summon::core::ParseModelLayout(request.layout_json(),
                                     {/*nodes=*/1, kLocalRanks});
  if (!spec.ok()) return true;  // The daemon refuses it before allocating.
  int64_t bytes = 0;
  for (const summon::core::UnitSpec& unit : spec->units) {
    bytes += unit.layout.shard_bytes() * kLocalRanks;
    if (unit.layout.shard_bytes() > kMaxModelBytes || bytes > kMaxModelBytes) {
      return false;
    }
  }
  return true;
}

}  // namespace summon::fuzz
