#ifndef SUMMON_SERVER_TESTING_CHECKPOINT_TEST_MODEL_H_
#define SUMMON_SERVER_TESTING_CHECKPOINT_TEST_MODEL_H_

// The model and shard fixtures shared by the checkpoint tests: a small model
// with awkward sizes, every rank's shards in memory, and comparisons.

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"

namespace summon::server {

// Pre-fills shards: padding must keep it.
inline constexpr uint8_t kMarker = 0xA5;
inline constexpr uint64_t kSeed = 17;

// Odd sizes so that every strategy below has padding and slices that start
// and end mid-parameter; three dtypes; a tied head.
inline constexpr char kLayout[] = R"({"strategy": "FULL_SHARD",
  "use_orig_params": true, "units": [
  {"fqn": "", "params": [
    {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
    {"fqn": "norm.w", "shape": [3], "dtype": "float32"},
    {"fqn": "head.w", "alias_of": "embed.w"}]},
  {"fqn": "layers.0", "params": [
    {"fqn": "layers.0.w", "shape": [5, 5], "dtype": "float32"},
    {"fqn": "layers.0.b", "shape": [5], "dtype": "float32"}]},
  {"fqn": "layers.1", "params": [
    {"fqn": "layers.1.w", "shape": [3, 7], "dtype": "bfloat16"},
    {"fqn": "layers.1.b", "shape": [1], "dtype": "bfloat16"}]},
  {"fqn": "layers.2", "params": [
    {"fqn": "layers.2.w", "shape": [2, 3], "dtype": "float64"}]}]})";

// The bytes of kLayout's primaries (the tied head is stored once).
inline constexpr int64_t kTensorBytes =
    40 * 4 + 3 * 4 + 25 * 4 + 5 * 4 + 21 * 2 + 1 * 2 + 6 * 8;

inline std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "/checkpoint_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

inline core::ModelSpec Model(core::Strategy strategy, core::Topology topology,
                             bool use_orig_params = true) {
  const std::string layout =
      use_orig_params ? std::string(kLayout)
                      : absl::StrReplaceAll(kLayout, {{"\"use_orig_params\": "
                                                       "true",
                                                       "\"use_orig_params\": "
                                                       "false"}});
  absl::StatusOr<core::ModelSpec> model =
      core::ParseModelLayout(layout, topology, strategy);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

inline std::vector<int> AllRanks(const core::ModelSpec& model) {
  std::vector<int> ranks;
  for (int r = 0; r < model.groups.topology.world_size(); ++r) {
    ranks.push_back(r);
  }
  return ranks;
}

// Every rank's shard of every unit, pre-filled with kMarker.
class Shards {
 public:
  explicit Shards(const core::ModelSpec& model) : model_(model) {
    for (int rank = 0; rank < model.groups.topology.world_size(); ++rank) {
      for (const core::UnitSpec& unit : model.units) {
        bytes_[rank].push_back(
            std::vector<uint8_t>(unit.layout.shard_bytes(), kMarker));
      }
    }
  }

  core::ShardAddress Address() {
    return [this](int rank, int unit) { return bytes_[rank][unit].data(); };
  }

  // Seeded values in the owned slices of `ranks`; padding keeps the marker.
  void FillOwnedSlices(const std::vector<int>& ranks, uint64_t seed) {
    for (int rank : ranks) {
      const int position = model_.groups.PositionOf(rank);
      for (size_t u = 0; u < model_.units.size(); ++u) {
        const core::FlatParamLayout& layout = model_.units[u].layout;
        for (size_t p = 0; p < layout.params().size(); ++p) {
          const core::ShardSlice slice = layout.SliceOf(p, position);
          if (!slice.in_shard) continue;
          ASSERT_TRUE(
              core::FillSeeded(
                  layout.params()[p].fqn, seed, layout.dtype(),
                  slice.intra_start, slice.numel_in_shard,
                  bytes_[rank][u].data() +
                      slice.offset_in_shard * core::ElementSize(layout.dtype()))
                  .ok());
        }
      }
    }
  }

  const std::vector<uint8_t>& Of(int rank, int unit) const {
    return bytes_.at(rank)[unit];
  }

 private:
  const core::ModelSpec& model_;
  std::map<int, std::vector<std::vector<uint8_t>>> bytes_;
};

inline void ExpectSameShards(const core::ModelSpec& model, const Shards& got,
                             const Shards& want,
                             const std::vector<int>& ranks) {
  for (int rank : ranks) {
    for (size_t u = 0; u < model.units.size(); ++u) {
      EXPECT_EQ(got.Of(rank, u), want.Of(rank, u))
          << "rank " << rank << " unit '" << model.units[u].fqn << "'";
    }
  }
}

inline std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_CHECKPOINT_TEST_MODEL_H_
