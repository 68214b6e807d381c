#ifndef SUMMON_SERVER_TESTING_SHARD_STORE_FIXTURE_H_
#define SUMMON_SERVER_TESTING_SHARD_STORE_FIXTURE_H_

// The fixture shared by the shard store's tests (shard_segments_test.cc and
// shard_store_test.cc): a two-unit model on two ranks, a fresh instance per
// test whose leftovers are unlinked, and byte patterns to fill and check
// shards with.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "server/store/shard_store.h"

namespace summon::server {

// Root unit: embed.w (40) + norm.w (3) + alignment/end padding = 44
// elements, 22 per rank at G = 2 (88 bytes); layers.0: 16 elements, 8 per
// rank (32 bytes).
inline constexpr char kLayout[] = R"({
  "strategy": "FULL_SHARD",
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "norm.w", "shape": [3], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.w", "shape": [4, 4], "dtype": "float32"}]}
  ]
})";

inline constexpr char kModel[] = "gpt";
inline const std::vector<int> kRanks = {0, 1};

inline core::ModelSpec Spec(absl::string_view json,
                            core::Topology topology = core::Topology{1, 2}) {
  absl::StatusOr<core::ModelSpec> spec = core::ParseModelLayout(json, topology);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : core::ModelSpec();
}

// A byte that differs per rank, unit, index and writer.
inline uint8_t Pattern(int rank, int unit, int64_t index, int salt) {
  return static_cast<uint8_t>(rank * 31 + unit * 7 + index + salt * 101);
}

inline void Fill(uint8_t* data, int rank, int unit, int64_t bytes, int salt) {
  for (int64_t i = 0; i < bytes; ++i) data[i] = Pattern(rank, unit, i, salt);
}

// Index of the first byte that is not the pattern, or -1.
inline int64_t FirstMismatch(const uint8_t* data, int rank, int unit,
                             int64_t bytes, int salt) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != Pattern(rank, unit, i, salt)) return i;
  }
  return -1;
}

inline int64_t FirstNonZero(const uint8_t* data, int64_t bytes) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != 0) return i;
  }
  return -1;
}

inline ::testing::AssertionResult Mentions(const absl::Status& status,
                                           absl::string_view text) {
  if (status.message().find(text) != absl::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "'" << status.message() << "' does not mention '" << text << "'";
}

class ShardStoreTest : public ::testing::Test {
 protected:
  ShardStoreTest()
      : instance_(absl::StrCat("test", getpid(), "n", next_instance_++)),
        spec_(Spec(kLayout)) {}

  // Whatever a failing test left behind must not leak into /dev/shm.
  ~ShardStoreTest() override {
    for (const std::string& name : ShardStore::ListSegments(instance_)) {
      shm_unlink(name.c_str());
    }
  }

  std::unique_ptr<ShardStore> Open(AttachMode mode,
                                   const std::vector<int>& ranks = kRanks) {
    absl::StatusOr<std::unique_ptr<ShardStore>> store =
        ShardStore::CreateOrAttach(instance_, kModel, spec_, ranks, mode,
                                   nullptr, staging_pool_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string Name(int rank, SegmentKind kind) const {
    return ShardStore::SegmentName(instance_, kModel, rank, kind);
  }

  int64_t UnitBytes(int unit) const {
    return spec_.units[unit].layout.shard_bytes();
  }

  static inline int next_instance_ = 0;
  const std::string instance_;
  const core::ModelSpec spec_;
  // Spares are kept briefly, so a test sees them unlinked within seconds.
  std::shared_ptr<StagingPool> staging_pool_ = std::make_shared<StagingPool>(
      StagingPool::Options{int64_t{1} << 30, absl::Milliseconds(300)});
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_SHARD_STORE_FIXTURE_H_
