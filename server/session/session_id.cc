#include "server/session/session_id.h"

#include <random>

#include "absl/base/const_init.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace summon::server {
namespace {

constexpr int kTagBits = 24;
constexpr int kRandomBits = 64 - kTagBits;

}  // namespace

uint32_t EpochTag(uint64_t epoch) {
  return static_cast<uint32_t>(epoch & ((uint64_t{1} << kTagBits) - 1));
}

std::string NewSessionId(uint64_t epoch) {
  static std::mt19937_64 generator{std::random_device{}()};
  ABSL_CONST_INIT static absl::Mutex generator_mu(absl::kConstInit);
  uint64_t random = 0;
  {
    absl::MutexLock lock(&generator_mu);
    random = generator();
  }
  // 40 random bits: a repeat among the sessions one leader holds at once
  // (thousands) is about 1 in 10^8 per open.
  random &= (uint64_t{1} << kRandomBits) - 1;
  return absl::StrFormat("s-%016x",
                         (uint64_t{EpochTag(epoch)} << kRandomBits) | random);
}

std::optional<uint32_t> SessionIdEpochTag(absl::string_view id) {
  uint64_t value = 0;
  if (id.size() != 18 || !absl::ConsumePrefix(&id, "s-") ||
      !absl::SimpleHexAtoi(id, &value)) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(value >> kRandomBits);
}

}  // namespace summon::server
