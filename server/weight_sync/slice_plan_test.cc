// PlanSlice against a model whose every element says where it belongs:
// each rank's shard holds, at every owned position, the element's index in
// flatten(param) (+1; padding stays 0), so applying a plan must give back
// exactly the indices of the box, row-major, for any layout and box.

#include "server/weight_sync/slice_plan.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

constexpr char kFlatLayout[] = R"({"units": [
  {"fqn": "", "params": [{"fqn": "embed", "shape": [7, 3], "dtype": "float32"}]},
  {"fqn": "l0", "params": [
    {"fqn": "l0.w", "shape": [5, 6], "dtype": "float32"},
    {"fqn": "l0.b", "shape": [5], "dtype": "float32"},
    {"fqn": "l0.s", "shape": [], "dtype": "float32"}]}]})";

constexpr char kFsdp2Layout[] = R"({"kind": "fsdp2", "units": [
  {"fqn": "", "params": [{"fqn": "embed", "shape": [7, 3], "dtype": "float32"}]},
  {"fqn": "l0", "params": [
    {"fqn": "l0.w", "shape": [5, 6], "dtype": "float32"},
    {"fqn": "l0.c", "shape": [3, 8, 2], "dtype": "float32", "shard_dim": 1}]}]})";

core::ModelSpec Parse(absl::string_view json, core::Topology topology,
                      std::optional<core::Strategy> strategy = std::nullopt) {
  absl::StatusOr<core::ModelSpec> spec =
      core::ParseModelLayout(json, topology, strategy);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// shards[rank][unit]: flatten index + 1 at every owned element.
std::map<int, std::vector<std::vector<double>>> IndexShards(
    const core::ModelSpec& spec) {
  std::map<int, std::vector<std::vector<double>>> shards;
  for (int rank = 0; rank < spec.groups.topology.world_size(); ++rank) {
    const int position = spec.groups.PositionOf(rank);
    for (const core::UnitSpec& unit : spec.units) {
      std::vector<double> shard(unit.layout.chunk_numel(), 0);
      for (size_t p = 0; p < unit.layout.params().size(); ++p) {
        core::ForEachRun(unit.layout.SliceOf(static_cast<int>(p), position),
                         [&](int64_t intra, int64_t at, int64_t numel) {
                           for (int64_t i = 0; i < numel; ++i) {
                             shard[at + i] = static_cast<double>(intra + i + 1);
                           }
                         });
      }
      shards[rank].push_back(std::move(shard));
    }
  }
  return shards;
}

// The box's flatten indices + 1, row-major.
std::vector<double> Expected(const core::Shape& shape,
                             const std::vector<std::pair<int64_t, int64_t>>& box) {
  std::vector<double> out;
  std::vector<int64_t> index(shape.size(), 0);
  int64_t numel = 1;
  for (const auto& [start, length] : box) numel *= length;
  for (int64_t n = 0; n < numel; ++n) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      flat = flat * shape[d] + box[d].first + index[d];
    }
    out.push_back(static_cast<double>(flat + 1));
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < box[d].second) break;
      index[d] = 0;
    }
  }
  return out;
}

void ExpectBox(const core::ModelSpec& spec, const std::string& fqn,
               const std::vector<std::pair<int64_t, int64_t>>& box,
               int reader_node = 0) {
  SCOPED_TRACE(fqn);
  auto shards = IndexShards(spec);
  absl::StatusOr<SlicePlan> plan =
      PlanSlice(spec, SliceRequest{fqn, box, std::nullopt}, reader_node);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<double> got(plan->numel, -1);
  int64_t covered = 0;
  for (const VersionPiece& piece : plan->pieces) {
    for (int64_t i = 0; i < piece.numel; ++i) {
      got[piece.dest_element + i] =
          shards[piece.rank][piece.unit][piece.shard_element + i];
    }
    covered += piece.numel;
  }
  EXPECT_EQ(covered, plan->numel);  // Every element once.
  core::Shape shape = spec.Param(*spec.FindParam(fqn)).shape;
  EXPECT_EQ(got, Expected(shape, box));
}

TEST(SlicePlanTest, FlatLayoutRowsColumnsAndScalars) {
  const core::ModelSpec spec = Parse(kFlatLayout, core::Topology{2, 2});
  ExpectBox(spec, "embed", {{0, 7}, {0, 3}});
  ExpectBox(spec, "embed", {{2, 3}, {0, 3}});   // Rows (column parallel).
  ExpectBox(spec, "l0.w", {{0, 5}, {3, 3}});    // Columns (row parallel).
  ExpectBox(spec, "l0.w", {{1, 3}, {2, 2}});
  ExpectBox(spec, "l0.b", {{4, 1}});
  ExpectBox(spec, "l0.s", {});
}

TEST(SlicePlanTest, Fsdp2LayoutIncludingAShardDimAboveZero) {
  const core::ModelSpec spec = Parse(kFsdp2Layout, core::Topology{1, 4});
  ExpectBox(spec, "embed", {{0, 7}, {0, 3}});
  ExpectBox(spec, "embed", {{5, 2}, {1, 2}});
  ExpectBox(spec, "l0.w", {{0, 5}, {0, 3}});
  ExpectBox(spec, "l0.c", {{0, 3}, {0, 8}, {0, 2}});
  ExpectBox(spec, "l0.c", {{1, 2}, {3, 4}, {1, 1}});
}

TEST(SlicePlanTest, ReplicasAreReadOnTheReadersNode) {
  // HYBRID_SHARD: each node holds a full copy, so nothing is remote.
  const core::ModelSpec spec =
      Parse(kFlatLayout, core::Topology{2, 2}, core::Strategy::kHybridShard);
  for (int node = 0; node < 2; ++node) {
    absl::StatusOr<SlicePlan> plan =
        PlanSlice(spec, SliceRequest{"l0.w", {{0, 5}, {0, 6}}, std::nullopt},
                  node);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const VersionPiece& piece : plan->pieces) {
      EXPECT_EQ(spec.groups.topology.NodeOf(piece.rank), node);
    }
    ExpectBox(spec, "l0.w", {{0, 5}, {1, 4}}, node);
  }
}

TEST(SlicePlanTest, BadBoxesNamesAndDtypesAreRefused) {
  const core::ModelSpec spec = Parse(kFlatLayout, core::Topology{1, 2});
  auto plan = [&](SliceRequest request) {
    return PlanSlice(spec, request, 0).status();
  };
  absl::Status status = plan({"nope", {{0, 1}}, std::nullopt});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  status = plan({"l0.w", {{0, 5}}, std::nullopt});
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_NE(status.message().find("has 2"), absl::string_view::npos);
  status = plan({"l0.w", {{0, 5}, {4, 3}}, std::nullopt});
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_NE(status.message().find("dimension 1"), absl::string_view::npos);
  status = plan({"l0.w", {{-1, 2}, {0, 6}}, std::nullopt});
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  status = plan({"l0.w", {{0, 5}, {0, 6}}, core::DType::kFloat16});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("float16 loses the range of the stored float32"),
            absl::string_view::npos)
      << status;
  EXPECT_TRUE(plan({"l0.w", {{0, 5}, {0, 6}}, core::DType::kBFloat16}).ok());
  EXPECT_TRUE(plan({"l0.w", {{0, 5}, {0, 6}}, core::DType::kFloat64}).ok());
}

TEST(SlicePlanTest, BatchesCutPiecesInOrderAndCoverEveryElementOnce) {
  const std::vector<VersionPiece> pieces = {
      {0, 1, 100, 3, 0}, {1, 1, 0, 10, 3}, {0, 2, 7, 2, 13}};
  const std::vector<std::vector<VersionPiece>> batches =
      CutIntoBatches(pieces, 4);
  auto as_tuple = [](const VersionPiece& p) {
    return std::make_tuple(p.rank, p.unit, p.shard_element, p.numel,
                           p.dest_element);
  };
  using T = std::tuple<int, int, int64_t, int64_t, int64_t>;
  const std::vector<std::vector<T>> expected = {
      {T{0, 1, 100, 3, 0}, T{1, 1, 0, 1, 3}},
      {T{1, 1, 1, 4, 4}},
      {T{1, 1, 5, 4, 8}},
      {T{1, 1, 9, 1, 12}, T{0, 2, 7, 2, 13}}};
  ASSERT_EQ(batches.size(), expected.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    std::vector<T> got;
    for (const VersionPiece& piece : batches[b]) got.push_back(as_tuple(piece));
    EXPECT_EQ(got, expected[b]) << "batch " << b;
  }
  // One batch when everything fits; none for no pieces.
  EXPECT_EQ(CutIntoBatches(pieces, 15).size(), 1u);
  EXPECT_TRUE(CutIntoBatches({}, 4).empty());
}

TEST(SlicePlanTest, CopiersShareThePiecesInOrderByBytes) {
  // Entry 0: 3 + 10 float32 elements (52 bytes); entry 1: none; entry 2:
  // 6 bfloat16 (12 bytes). 64 bytes for 2 copiers: 32 each.
  const std::vector<std::vector<VersionPiece>> pieces = {
      {{0, 1, 100, 3, 0}, {1, 1, 0, 10, 3}}, {}, {{0, 2, 7, 6, 0}}};
  const std::vector<std::vector<EntryPieces>> shares =
      ShareAmongCopiers(pieces, {4, 4, 2}, 2);
  using T = std::tuple<int, int, int, int64_t, int64_t, int64_t>;
  auto flat = [](const std::vector<EntryPieces>& runs) {
    std::vector<T> got;
    for (const EntryPieces& run : runs) {
      for (const VersionPiece& p : run.pieces) {
        got.push_back(T{run.entry, p.rank, p.unit, p.shard_element, p.numel,
                        p.dest_element});
      }
    }
    return got;
  };
  ASSERT_EQ(shares.size(), 2u);
  // 12 + 20 bytes; the second piece split after its 5th element.
  EXPECT_EQ(flat(shares[0]),
            (std::vector<T>{T{0, 0, 1, 100, 3, 0}, T{0, 1, 1, 0, 5, 3}}));
  EXPECT_EQ(flat(shares[1]),
            (std::vector<T>{T{0, 1, 1, 5, 5, 8}, T{2, 0, 2, 7, 6, 0}}));
  EXPECT_EQ(shares[1].size(), 2u);  // One run per entry.
  // A share that ends inside an element takes it whole: 3 copiers of 64
  // bytes (22 each) take 6, 6 and 1 float32 of the 13, then the bfloat16.
  const std::vector<std::vector<EntryPieces>> thirds =
      ShareAmongCopiers(pieces, {4, 4, 2}, 3);
  ASSERT_EQ(thirds.size(), 3u);
  EXPECT_EQ(flat(thirds[0]),
            (std::vector<T>{T{0, 0, 1, 100, 3, 0}, T{0, 1, 1, 0, 3, 3}}));
  EXPECT_EQ(flat(thirds[1]), (std::vector<T>{T{0, 1, 1, 3, 6, 6}}));
  EXPECT_EQ(flat(thirds[2]),
            (std::vector<T>{T{0, 1, 1, 9, 1, 12}, T{2, 0, 2, 7, 6, 0}}));
  // One copier takes everything; nothing to copy, no shares.
  EXPECT_EQ(ShareAmongCopiers(pieces, {4, 4, 2}, 1).size(), 1u);
  EXPECT_TRUE(ShareAmongCopiers({{}, {}}, {4, 4}, 2).empty());
}

}  // namespace
}  // namespace summon::server
