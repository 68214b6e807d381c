#ifndef SUMMON_CORE_LAYOUT_H_
#define SUMMON_CORE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace summon::core {

// One original (primary) parameter handed to the flattener, in flattening
// order. Tied aliases are not listed: they are stored once, as their primary.
struct FlatParamInput {
  std::string fqn;
  Shape shape;
  DType dtype;
};

// A primary parameter's place in the unsharded flat index space.
struct FlatParamEntry {
  std::string fqn;
  Shape shape;
  DType dtype;
  int64_t numel = 0;
  int64_t flat_offset = 0;  // First element in the unsharded flat parameter.
};

// A stretch of the unsharded flat parameter: a parameter or padding.
struct FlatSegment {
  int64_t start = 0;
  int64_t numel = 0;
  int param_index = -1;  // -1: alignment or end padding.
};

// The part of one parameter held by one shard-group position
// (docs/design.md#who-owns-what). `intra_end` is inclusive, as in FSDP's
// bookkeeping.
struct ShardSlice {
  bool in_shard = false;
  int64_t intra_start = 0;      // First owned element of flatten(param).
  int64_t intra_end = -1;       // Last owned element (inclusive).
  int64_t offset_in_shard = 0;  // Where intra_start sits in the local shard.
  int64_t numel_in_shard = 0;
};

// FSDP's flat-parameter layout for one unit and one shard-group size G:
// parameter order, `use_orig_params` alignment padding, end padding, chunk
// c = ceil(N / G) and the per-position intersections.
class FlatParamLayout {
 public:
  // `compute_dtype` is the mixed-precision param dtype when there is one; it
  // only sets the alignment (16 bytes / its element size). All params must
  // share one floating-point dtype (R14 and FSDP's single-dtype rule).
  static absl::StatusOr<FlatParamLayout> Build(
      const std::vector<FlatParamInput>& params, bool use_orig_params,
      int group_size, std::optional<DType> compute_dtype = std::nullopt);

  FlatParamLayout() = default;

  DType dtype() const { return dtype_; }
  bool use_orig_params() const { return use_orig_params_; }
  int group_size() const { return group_size_; }
  const std::vector<FlatParamEntry>& params() const { return params_; }
  const std::vector<FlatSegment>& segments() const { return segments_; }

  // N: the unsharded length before per-rank padding. In orig-params mode it
  // includes alignment and end padding (so it is a multiple of G).
  int64_t unpadded_numel() const { return unpadded_numel_; }
  // c = ceil(N / G): every position's local shard has exactly c elements.
  int64_t chunk_numel() const { return chunk_numel_; }
  int64_t padded_numel() const { return chunk_numel_ * group_size_; }
  int64_t shard_bytes() const {
    return chunk_numel_ * static_cast<int64_t>(ElementSize(dtype_));
  }

  // Flat range [begin, end) of non-per-rank-padding elements at `position`
  // (may be empty when position * c >= N).
  int64_t RealBegin(int position) const;
  int64_t RealEnd(int position) const;

  // Intersection of parameter `param_index` with position `position`.
  ShardSlice SliceOf(int param_index, int position) const;

  // Index in params() of `fqn`, or -1.
  int FindParam(const std::string& fqn) const;

 private:
  DType dtype_ = DType::kFloat32;
  bool use_orig_params_ = true;
  int group_size_ = 1;
  std::vector<FlatParamEntry> params_;
  std::vector<FlatSegment> segments_;
  int64_t unpadded_numel_ = 0;
  int64_t chunk_numel_ = 0;
};

}  // namespace summon::core

#endif  // SUMMON_CORE_LAYOUT_H_
