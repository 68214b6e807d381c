#ifndef SUMMON_SERVER_WEIGHT_SYNC_SLICE_PLAN_H_
#define SUMMON_SERVER_WEIGHT_SYNC_SLICE_PLAN_H_

// Where the elements of one box of one parameter live: the pieces of rank
// shards that, concatenated in order, are the box row-major. Pure over the
// model's spec, so the reader's node plans and the owners only copy.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/model_spec.h"

namespace summon::server {

// `numel` elements of `rank`'s shard of `unit` from `shard_element` on: the
// elements [dest_element, dest_element + numel) of the box.
struct VersionPiece {
  int rank = 0;
  int unit = 0;
  int64_t shard_element = 0;
  int64_t numel = 0;
  int64_t dest_element = 0;
};

struct SliceRequest {
  std::string fqn;
  std::vector<std::pair<int64_t, int64_t>> box;  // (start, length) per dim.
  std::optional<core::DType> dtype;              // Unset: the stored dtype.
};

struct SlicePlan {
  core::Shape shape;  // The box's lengths.
  core::DType source = core::DType::kFloat32;
  core::DType dtype = core::DType::kFloat32;
  int64_t numel = 0;
  int64_t bytes = 0;  // numel * ElementSize(dtype).
  // In dest order, adjacent ones merged where both sides are contiguous.
  std::vector<VersionPiece> pieces;
};

// INVALID_ARGUMENT naming both dtypes when `to` cannot hold every finite
// value of `from` (float16 from float32, float64 or bfloat16; anything from
// float64 but float64) or is not floating point; precision may be lost
// (float32 to bfloat16), range never.
absl::Status CheckKeepsRange(core::DType from, core::DType to);

// The plan of one box, reading each owned chunk from a replica on
// `reader_node` where there is one (no bytes between nodes), else from the
// lowest rank holding it. NOT_FOUND for an unknown FQN (R11), OUT_OF_RANGE
// for a box with the wrong number of dimensions or outside the tensor,
// INVALID_ARGUMENT for a dtype that loses range.
absl::StatusOr<SlicePlan> PlanSlice(const core::ModelSpec& spec,
                                    const SliceRequest& request,
                                    int reader_node);

// `pieces` cut, in order, into batches of at most `max_numel` elements
// each, a piece larger than that split across batches (its shard and dest
// elements advanced): one remote fetch per batch, so a large entry's
// bytes come over several fetches at once. `max_numel` > 0.
std::vector<std::vector<VersionPiece>> CutIntoBatches(
    const std::vector<VersionPiece>& pieces, int64_t max_numel);

// Consecutive pieces of one entry (an index into the caller's entries).
struct EntryPieces {
  int entry = 0;
  std::vector<VersionPiece> pieces;
};

// `pieces[i]` (entry i's, `element_bytes[i]` bytes an element) cut, in
// order, into `copiers` shares of about equal bytes (the last may be
// smaller; fewer when there are fewer bytes than elements to split), a
// piece split where a share ends: one thread copies each share. Entries
// without pieces appear in none. `copiers` > 0.
std::vector<std::vector<EntryPieces>> ShareAmongCopiers(
    const std::vector<std::vector<VersionPiece>>& pieces,
    const std::vector<int64_t>& element_bytes, int copiers);

}  // namespace summon::server

#endif  // SUMMON_SERVER_WEIGHT_SYNC_SLICE_PLAN_H_
