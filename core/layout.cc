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

// R14 and the one-dtype rule: every parameter of a unit is floating point and
// shares the first one's dtype (FSDP1's flat parameter needs it; for FSDP2
// summon keeps it so a unit shard is one dtype).
absl::Status CheckOneDType(const std::vector<FlatParamInput>& params) {
  if (params.empty()) return absl::OkStatus();
  const DType dtype = params.front().dtype;
  for (const FlatParamInput& param : params) {
    if (absl::Status status = CheckFlattenable(param.fqn, param.dtype);
        !status.ok()) {
      return status;
    }
    if (param.dtype != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", param.fqn, "' has dtype ", DTypeName(param.dtype),
          " but the unit's shard is ", DTypeName(dtype),
          ": all parameters of a unit must share one dtype"));
    }
  }
  return absl::OkStatus();
}

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t d = begin; d < end; ++d) product *= shape[d];
  return product;
}

}  // namespace

absl::StatusOr<LayoutKind> ParseLayoutKind(absl::string_view name) {
  if (name == "flat") return LayoutKind::kFlat;
  if (name == "fsdp2") return LayoutKind::kFsdp2;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown layout kind '", name, "' (known: flat, fsdp2)"));
}

absl::string_view LayoutKindName(LayoutKind kind) {
  return kind == LayoutKind::kFsdp2 ? "fsdp2" : "flat";
}

absl::StatusOr<FlatParamLayout> FlatParamLayout::Build(
    const std::vector<FlatParamInput>& params, bool use_orig_params,
    int group_size, std::optional<DType> compute_dtype,
    int process_group_size) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard group size must be >= 1, got ", group_size));
  }
  if (process_group_size == 0) process_group_size = group_size;
  if (process_group_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process group size must be >= 1, got ", process_group_size));
  }
  FlatParamLayout layout;
  layout.use_orig_params_ = use_orig_params;
  layout.group_size_ = group_size;
  if (!params.empty()) layout.dtype_ = params.front().dtype;
  if (absl::Status status = CheckOneDType(params); !status.ok()) return status;
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
        {param.fqn, param.shape, param.dtype, *numel, offset, 0, 0});
    layout.segments_.push_back({offset, *numel, index});
    offset += *numel;
  }
  // In orig-params mode the end padding to a multiple of the process group
  // size (G, or W under NO_SHARD) is part of N, so the per-rank padding below
  // is always zero there (torch's _init_flat_param_and_metadata).
  if (use_orig_params && offset % process_group_size != 0) {
    add_padding(process_group_size - offset % process_group_size);
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

absl::StatusOr<FlatParamLayout> FlatParamLayout::BuildFsdp2(
    const std::vector<FlatParamInput>& params, int group_size) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard group size must be >= 1, got ", group_size));
  }
  FlatParamLayout layout;
  layout.kind_ = LayoutKind::kFsdp2;
  layout.use_orig_params_ = true;  // FSDP2 keeps the original parameters.
  layout.group_size_ = group_size;
  if (!params.empty()) layout.dtype_ = params.front().dtype;
  if (absl::Status status = CheckOneDType(params); !status.ok()) return status;
  int64_t offset = 0;
  for (const FlatParamInput& param : params) {
    const std::string where = absl::StrCat("parameter '", param.fqn, "'");
    absl::StatusOr<int64_t> numel = NumElements(param.shape);
    if (!numel.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", numel.status().message()));
    }
    const int ndim = static_cast<int>(param.shape.size());
    // torch: "Shard dim {d} is invalid for {ndim}D tensor" (a 0-d parameter
    // has no dim to chunk).
    if (param.shard_dim < 0 || param.shard_dim >= ndim) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": shard_dim ", param.shard_dim, " is invalid for its ", ndim,
          "-d shape ", ShapeToString(param.shape)));
    }
    const int64_t size = param.shape[param.shard_dim];
    // torch refuses it too: uneven sharding on a dim > 0 would need copies
    // around every collective.
    if (param.shard_dim > 0 && size % group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": FSDP2 does not support uneven sharding on dim ",
          param.shard_dim, ": ", ShapeToString(param.shape),
          " over a shard group of ", group_size));
    }
    const int64_t rows = (size + group_size - 1) / group_size;
    const int64_t padded =
        *numel == 0 ? 0 : *numel / size * rows;  // Chunk 0's numel.
    // Every position stores the padded chunk, so G of them must stay
    // addressable (a 1-row parameter over many ranks multiplies its size).
    if (padded >
        std::numeric_limits<int64_t>::max() / 4 / group_size - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " makes the unit too large to address"));
    }
    const int index = static_cast<int>(layout.params_.size());
    layout.params_.push_back({param.fqn, param.shape, param.dtype, *numel,
                              offset, param.shard_dim, padded});
    layout.segments_.push_back({offset, padded, index});
    offset += padded;
  }
  layout.chunk_numel_ = offset;
  layout.unpadded_numel_ = offset * group_size;  // The all-gather output.
  return layout;
}

int64_t FlatParamLayout::Fsdp2ChunkRows(int param_index) const {
  const FlatParamEntry& param = params_[param_index];
  const int64_t size = param.shape[param.shard_dim];
  return (size + group_size_ - 1) / group_size_;
}

int64_t FlatParamLayout::Fsdp2OwnedRows(int param_index, int position) const {
  const FlatParamEntry& param = params_[param_index];
  const int64_t rows = Fsdp2ChunkRows(param_index);
  const int64_t left = param.shape[param.shard_dim] - position * rows;
  return std::clamp<int64_t>(left, 0, rows);
}

ShardSlice FlatParamLayout::Fsdp2SliceOf(int param_index, int position) const {
  const FlatParamEntry& param = params_[param_index];
  ShardSlice slice;
  const int64_t owned = Fsdp2OwnedRows(param_index, position);
  if (param.numel == 0 || owned == 0) return slice;
  const size_t dim = static_cast<size_t>(param.shard_dim);
  const int64_t inner = Product(param.shape, dim + 1, param.shape.size());
  slice.in_shard = true;
  slice.runs = Product(param.shape, 0, dim);
  slice.run_numel = owned * inner;
  slice.run_stride = param.shape[dim] * inner;
  slice.intra_start = position * Fsdp2ChunkRows(param_index) * inner;
  slice.intra_end = slice.intra_start + (slice.runs - 1) * slice.run_stride +
                    slice.run_numel - 1;
  slice.offset_in_shard = param.flat_offset;
  slice.numel_in_shard = slice.runs * slice.run_numel;
  return slice;
}

Shape FlatParamLayout::LocalShape(int param_index, int position) const {
  if (kind_ == LayoutKind::kFlat) {
    return {SliceOf(param_index, position).numel_in_shard};
  }
  const FlatParamEntry& param = params_[param_index];
  Shape shape = param.shape;
  shape[param.shard_dim] = Fsdp2OwnedRows(param_index, position);
  return shape;
}

Shape FlatParamLayout::PaddedLocalShape(int param_index, int position) const {
  if (kind_ == LayoutKind::kFlat) return LocalShape(param_index, position);
  const FlatParamEntry& param = params_[param_index];
  Shape shape = param.shape;
  shape[param.shard_dim] = Fsdp2ChunkRows(param_index);
  return shape;
}

ShardSlice FlatParamLayout::SliceOf(int param_index, int position) const {
  if (kind_ == LayoutKind::kFsdp2) return Fsdp2SliceOf(param_index, position);
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
  slice.run_numel = slice.numel_in_shard;
  slice.run_stride = slice.numel_in_shard;
  return slice;
}

int FlatParamLayout::FindParam(const std::string& fqn) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].fqn == fqn) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace summon::core
