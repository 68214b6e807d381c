#include "memory/parallel_copy.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace summon::memory {
namespace {

// Pieces start on cache-line-and-page friendly boundaries.
constexpr int64_t kPieceAlignment = int64_t{64} << 10;

int CoresAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

int ParallelCopyThreads() {
  static const int threads = std::min(4, CoresAvailable());
  return threads;
}

void ParallelCopy(void* to, const void* from, int64_t bytes) {
  if (bytes <= 0) return;
  const int64_t min_piece = kParallelCopyMinBytes / 2;
  const int pieces = static_cast<int>(
      std::min<int64_t>(ParallelCopyThreads(),
                        bytes < kParallelCopyMinBytes ? 1 : bytes / min_piece));
  if (pieces <= 1) {
    std::memcpy(to, from, bytes);
    return;
  }
  auto* out = static_cast<char*>(to);
  const auto* in = static_cast<const char*>(from);
  // Equal pieces rounded to the alignment; the last one takes the rest.
  const int64_t piece = (bytes / pieces + kPieceAlignment - 1) /
                        kPieceAlignment * kPieceAlignment;
  std::vector<std::thread> helpers;
  helpers.reserve(pieces - 1);
  for (int i = 1; i < pieces; ++i) {
    const int64_t begin = std::min(bytes, i * piece);
    const int64_t end =
        i + 1 == pieces ? bytes : std::min(bytes, begin + piece);
    if (end <= begin) break;
    helpers.emplace_back([out, in, begin, end] {
      std::memcpy(out + begin, in + begin, end - begin);
    });
  }
  std::memcpy(out, in, std::min(bytes, piece));
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace summon::memory
