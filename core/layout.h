#ifndef SUMMON_CORE_LAYOUT_H_
#define SUMMON_CORE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace summon::core {

// How a unit's parameters become each rank's shard (docs/design.md#layout-
// kinds). kFlat: FSDP1's flat parameter, one 1-D concatenation chunked as a
// whole. kFsdp2: FSDP2's per-parameter sharding, each parameter chunked on
// its shard dim like torch.chunk and padded to chunk 0's shape, a rank's unit
// shard the concatenation of its padded chunks (FSDP2's all-gather input).
enum class LayoutKind { kFlat, kFsdp2 };

// "flat", "fsdp2" (the layout file's "kind").
absl::StatusOr<LayoutKind> ParseLayoutKind(absl::string_view name);
absl::string_view LayoutKindName(LayoutKind kind);

// One original (primary) parameter handed to the flattener, in flattening
// order. Tied aliases are not listed: they are stored once, as their primary.
struct FlatParamInput {
  std::string fqn;
  Shape shape;
  DType dtype;
  int shard_dim = 0;  // kFsdp2 only: shard_placement_fn's Shard(dim).
};

// A primary parameter's place in the unit's index space.
struct FlatParamEntry {
  std::string fqn;
  Shape shape;
  DType dtype;
  int64_t numel = 0;
  // kFlat: first element in the unsharded flat parameter. kFsdp2: first
  // element of its padded chunk in every position's unit shard.
  int64_t flat_offset = 0;
  int shard_dim = 0;  // kFsdp2 only.
  // kFsdp2: elements of its padded chunk (torch's padded_sharded_param_size,
  // chunk 0's shape); every position reserves this many.
  int64_t padded_chunk_numel = 0;
};

// A stretch of the unsharded flat parameter: a parameter or padding.
struct FlatSegment {
  int64_t start = 0;
  int64_t numel = 0;
  int param_index = -1;  // -1: alignment or end padding.
};

// The part of one parameter held by one shard-group position
// (docs/design.md#who-owns-what). `intra_end` is inclusive, as in FSDP's
// bookkeeping. The owned elements are `runs` stretches of `run_numel`: run i
// starts at element intra_start + i * run_stride of flatten(param) and at
// offset_in_shard + i * run_numel of the local shard. That is one run except
// for an FSDP2 chunk on a dim > 0 (one run per index of the dims before it).
struct ShardSlice {
  bool in_shard = false;
  int64_t intra_start = 0;      // First owned element of flatten(param).
  int64_t intra_end = -1;       // Last owned element (inclusive).
  int64_t offset_in_shard = 0;  // Where intra_start sits in the local shard.
  int64_t numel_in_shard = 0;   // runs * run_numel.
  int64_t runs = 1;
  int64_t run_numel = 0;
  int64_t run_stride = 0;  // Elements of flatten(param) between run starts.
};

// Calls fn(intra_element, shard_element, numel) for each run of `slice`, in
// order; nothing when the slice is empty.
template <typename Fn>
void ForEachRun(const ShardSlice& slice, Fn&& fn) {
  if (!slice.in_shard) return;
  for (int64_t run = 0; run < slice.runs; ++run) {
    fn(slice.intra_start + run * slice.run_stride,
       slice.offset_in_shard + run * slice.run_numel, slice.run_numel);
  }
}

// One unit's layout for one shard-group size G. kFlat: FSDP's flat
// parameter: parameter order, `use_orig_params` alignment padding, end
// padding, chunk c = ceil(N / G) and the per-position intersections. kFsdp2:
// FSDP2's per-parameter chunks (BuildFsdp2). Either way every position's unit
// shard holds chunk_numel() elements and SliceOf says what it owns.
class FlatParamLayout {
 public:
  // `compute_dtype` is the mixed-precision param dtype when there is one; it
  // only sets the alignment (16 bytes / its element size). All params must
  // share one floating-point dtype (R14 and FSDP's single-dtype rule).
  // `process_group_size` (0: G) is what orig-params mode pads N to a multiple
  // of: FSDP pads to its process group's size, which under NO_SHARD is the
  // whole world although nothing is sharded (G = 1).
  static absl::StatusOr<FlatParamLayout> Build(
      const std::vector<FlatParamInput>& params, bool use_orig_params,
      int group_size, std::optional<DType> compute_dtype = std::nullopt,
      int process_group_size = 0);

  // FSDP2 (`fully_shard`) for one parameter group, in FSDP2's fsdp_params
  // order: parameter p is chunked like torch.chunk(p, G, shard_dim) (chunks
  // of ceil(size / G) along it, trailing ones shorter or empty), each
  // position storing its chunk zero-padded to chunk 0's shape, row-major, the
  // padded chunks back to back. As in torch, a 0-d parameter and an uneven
  // split on a dim > 0 are refused. All parameters share one dtype here.
  static absl::StatusOr<FlatParamLayout> BuildFsdp2(
      const std::vector<FlatParamInput>& params, int group_size);

  FlatParamLayout() = default;

  LayoutKind kind() const { return kind_; }
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

  // The shape of what `position` owns of parameter `param_index` (kFsdp2:
  // torch's sharded_size, dims before and after the shard dim kept; kFlat:
  // [numel_in_shard]), and the padded shape its storage takes (kFsdp2:
  // chunk 0's shape at every position; kFlat: the same as the owned shape).
  Shape LocalShape(int param_index, int position) const;
  Shape PaddedLocalShape(int param_index, int position) const;

  // Index in params() of `fqn`, or -1.
  int FindParam(const std::string& fqn) const;

 private:
  ShardSlice Fsdp2SliceOf(int param_index, int position) const;
  // kFsdp2: rows of the shard dim per chunk (ceil(size / G)) and the rows
  // `position` owns.
  int64_t Fsdp2ChunkRows(int param_index) const;
  int64_t Fsdp2OwnedRows(int param_index, int position) const;

  LayoutKind kind_ = LayoutKind::kFlat;
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
