#include "core/layout.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace summon::core {
namespace {

// FSDP aligns every parameter start to 16 bytes in use_orig_params mode, so
// the alignment in elements depends on the (compute) element size.
constexpr int64_t kAlignmentBytes = 16;

}  // namespace

absl::StatusOr<FlatParamLayout> FlatParamLayout::Build(
    const std::vector<FlatParamInput>& params, bool use_orig_params,
    int group_size, std::optional<DType> compute_dtype) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard group size must be >= 1, got ", group_size));
  }
  FlatParamLayout layout;
  layout.use_orig_params_ = use_orig_params;
  layout.group_size_ = group_size;
  if (!params.empty()) layout.dtype_ = params.front().dtype;
  for (const FlatParamInput& param : params) {
    if (absl::Status status = CheckFlattenable(param.fqn, param.dtype);
        !status.ok()) {
      return status;
    }
    if (param.dtype != layout.dtype_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", param.fqn, "' has dtype ", DTypeName(param.dtype),
          " but the unit's flat parameter is ", DTypeName(layout.dtype_),
          ": all parameters of a unit must share one dtype"));
    }
  }
  if (compute_dtype.has_value()) {
    if (absl::Status status = CheckFlattenable("compute_dtype", *compute_dtype);
        !status.ok()) {
      return status;
    }
  }
  const int64_t alignment =
      kAlignmentBytes /
      static_cast<int64_t>(ElementSize(compute_dtype.value_or(layout.dtype_)));

  int64_t offset = 0;
  auto add_padding = [&](int64_t numel) {
    layout.segments_.push_back({offset, numel, -1});
    offset += numel;
  };
  for (const FlatParamInput& param : params) {
    absl::StatusOr<int64_t> numel = NumElements(param.shape);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", param.fqn, "': ", numel.status().message()));
    }
    // Leaves headroom for padding so no offset below can overflow.
    if (*numel > std::numeric_limits<int64_t>::max() / 4 - offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", param.fqn, "' makes the unit too large to address"));
    }
    if (use_orig_params && offset % alignment != 0) {
      add_padding(alignment - offset % alignment);
    }
    const int index = static_cast<int>(layout.params_.size());
    layout.params_.push_back(
        {param.fqn, param.shape, param.dtype, *numel, offset});
    layout.segments_.push_back({offset, *numel, index});
    offset += *numel;
  }
  // In orig-params mode the end padding to a multiple of G is part of N, so
  // the per-rank padding below is always zero there.
  if (use_orig_params && offset % group_size != 0) {
    add_padding(group_size - offset % group_size);
  }
  layout.unpadded_numel_ = offset;
  layout.chunk_numel_ = (offset + group_size - 1) / group_size;
  return layout;
}

int64_t FlatParamLayout::RealBegin(int position) const {
  return std::min(position * chunk_numel_, unpadded_numel_);
}

int64_t FlatParamLayout::RealEnd(int position) const {
  return std::min((position + 1) * chunk_numel_, unpadded_numel_);
}

ShardSlice FlatParamLayout::SliceOf(int param_index, int position) const {
  const FlatParamEntry& param = params_[param_index];
  ShardSlice slice;
  if (param.numel == 0 || chunk_numel_ == 0) return slice;
  // Inclusive ranges, exactly as docs/design.md#who-owns-what states them.
  const int64_t rank_start = position * chunk_numel_;
  const int64_t rank_end = rank_start + chunk_numel_ - 1;
  const int64_t param_start = param.flat_offset;
  const int64_t param_end = param.flat_offset + param.numel - 1;
  if (rank_start > param_end || rank_end < param_start) return slice;
  slice.in_shard = true;
  if (rank_start <= param_start) {
    slice.intra_start = 0;
    slice.offset_in_shard = param_start - rank_start;
  } else {
    slice.intra_start = rank_start - param_start;
    slice.offset_in_shard = 0;
  }
  slice.intra_end = std::min(param_end, rank_end) - param_start;
  slice.numel_in_shard = slice.intra_end - slice.intra_start + 1;
  return slice;
}

int FlatParamLayout::FindParam(const std::string& fqn) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].fqn == fqn) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace summon::core
