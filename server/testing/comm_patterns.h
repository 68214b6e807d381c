#ifndef SUMMON_SERVER_TESTING_COMM_PATTERNS_H_
#define SUMMON_SERVER_TESTING_COMM_PATTERNS_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace summon::server {

// Byte `index` of rank `rank`'s contribution: differs between neighbouring
// bytes and between ranks, so a misplaced or stale byte shows.
inline uint8_t PatternByte(int rank, int64_t index) {
  return static_cast<uint8_t>((rank * 97 + index * 13 + (index >> 8) + 7) %
                              251);
}

inline std::vector<uint8_t> Pattern(int rank, int64_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (int64_t i = 0; i < bytes; ++i) out[i] = PatternByte(rank, i);
  return out;
}

// Runs `body(rank)` for every rank on its own thread (gloo's test style:
// n ranks in one process) and waits for all of them.
inline void RunOnRanks(int size, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_COMM_PATTERNS_H_
