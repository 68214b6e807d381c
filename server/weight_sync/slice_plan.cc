#include "server/weight_sync/slice_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace summon::server {
namespace {

// Exponent bits: what decides the range a dtype holds (float32 and
// bfloat16 share theirs, so a trainer's float32 reaches a bfloat16 engine).
int ExponentBits(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat64:
      return 11;
    case core::DType::kFloat32:
    case core::DType::kBFloat16:
      return 8;
    case core::DType::kFloat16:
      return 5;
    default:
      return 0;
  }
}

// For each position of the unit's shard group, the rank to read it from.
std::vector<int> SourceRanks(const core::ModelSpec& spec, int group_size,
                             int reader_node) {
  std::vector<int> source(group_size, -1);
  const core::ShardGroups& groups = spec.groups;
  for (int rank = 0; rank < groups.topology.world_size(); ++rank) {
    const int position = groups.PositionOf(rank);
    if (position < 0 || position >= group_size) continue;
    int& chosen = source[position];
    if (chosen < 0 || (groups.topology.NodeOf(rank) == reader_node &&
                       groups.topology.NodeOf(chosen) != reader_node)) {
      chosen = rank;
    }
  }
  return source;
}

// Adds the parts of flatten(param)[begin, begin + numel) that `slice` owns
// (read from `rank`) to `out`, `dest` being where `begin` lands in the box.
void IntersectRuns(const core::ShardSlice& slice, int rank, int unit,
                   int64_t begin, int64_t numel, int64_t dest,
                   std::vector<VersionPiece>& out) {
  if (!slice.in_shard || slice.run_numel <= 0) return;
  const int64_t end = begin + numel;
  // The first run that may reach `begin`: runs start every run_stride.
  int64_t first = 0;
  if (slice.runs > 1 && slice.run_stride > 0) {
    const int64_t reach = begin - slice.intra_start - slice.run_numel + 1;
    if (reach > 0) first = reach / slice.run_stride;
  }
  for (int64_t run = first; run < slice.runs; ++run) {
    const int64_t run_begin = slice.intra_start + run * slice.run_stride;
    if (run_begin >= end) break;
    const int64_t lo = std::max(begin, run_begin);
    const int64_t hi = std::min(end, run_begin + slice.run_numel);
    if (lo >= hi) continue;
    out.push_back(VersionPiece{
        rank, unit, slice.offset_in_shard + run * slice.run_numel +
                        (lo - run_begin),
        hi - lo, dest + (lo - begin)});
  }
}

void AppendMerged(std::vector<VersionPiece>& pieces, const VersionPiece& piece) {
  if (!pieces.empty()) {
    VersionPiece& last = pieces.back();
    if (last.rank == piece.rank && last.unit == piece.unit &&
        last.shard_element + last.numel == piece.shard_element &&
        last.dest_element + last.numel == piece.dest_element) {
      last.numel += piece.numel;
      return;
    }
  }
  pieces.push_back(piece);
}

}  // namespace

absl::Status CheckKeepsRange(core::DType from, core::DType to) {
  if (!core::IsFloatingPoint(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", core::DTypeName(to), " is not floating point"));
  }
  if (ExponentBits(to) < ExponentBits(from)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype ", core::DTypeName(to), " loses the range of the stored ",
        core::DTypeName(from), " (", ExponentBits(to), " exponent bits, not ",
        ExponentBits(from), "): ask for ", core::DTypeName(from),
        " or a dtype with its range"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SlicePlan> PlanSlice(const core::ModelSpec& spec,
                                    const SliceRequest& request,
                                    int reader_node) {
  absl::StatusOr<core::ParamLocation> location = spec.FindParam(request.fqn);
  if (!location.ok()) return location.status();
  const core::FlatParamLayout& layout = spec.units[location->unit].layout;
  const core::FlatParamEntry& param = spec.Param(*location);
  const core::Shape& shape = param.shape;
  if (request.box.size() != shape.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "box has ", request.box.size(), " dimensions; '", request.fqn,
        "' has ", shape.size(), " (shape ", core::ShapeToString(shape), ")"));
  }
  SlicePlan plan;
  plan.source = param.dtype;
  plan.dtype = request.dtype.value_or(param.dtype);
  if (absl::Status range = CheckKeepsRange(plan.source, plan.dtype);
      !range.ok()) {
    return range;
  }
  plan.numel = 1;
  for (size_t dim = 0; dim < shape.size(); ++dim) {
    const auto [start, length] = request.box[dim];
    if (start < 0 || length < 0 || start > shape[dim] ||
        length > shape[dim] - start) {
      return absl::OutOfRangeError(absl::StrCat(
          "box [", start, ", ", start, " + ", length, ") of dimension ", dim,
          " lies outside '", request.fqn, "' (shape ",
          core::ShapeToString(shape), ")"));
    }
    plan.shape.push_back(length);
    plan.numel *= length;
  }
  plan.bytes = plan.numel * static_cast<int64_t>(core::ElementSize(plan.dtype));
  if (plan.numel == 0) return plan;

  // Row-major: the box is contiguous in flatten(param) from the last dim
  // that is not taken whole (`inner`) on; one run per index of the dims
  // before it.
  const int dims = static_cast<int>(shape.size());
  int inner = dims - 1;
  int64_t run = 1;
  for (; inner >= 0; --inner) {
    run *= plan.shape[inner];
    if (plan.shape[inner] != shape[inner]) break;
  }
  if (inner < 0) inner = 0;
  std::vector<int64_t> strides(dims, 1);
  for (int dim = dims - 2; dim >= 0; --dim) {
    strides[dim] = strides[dim + 1] * shape[dim + 1];
  }
  const std::vector<int> sources =
      SourceRanks(spec, layout.group_size(), reader_node);
  std::vector<core::ShardSlice> slices;
  for (int position = 0; position < layout.group_size(); ++position) {
    slices.push_back(layout.SliceOf(location->param, position));
  }
  std::vector<int64_t> index(std::max(inner, 0), 0);  // Dims before `inner`.
  std::vector<VersionPiece> found;
  for (int64_t dest = 0; dest < plan.numel; dest += run) {
    int64_t begin = 0;
    for (int dim = 0; dim < dims; ++dim) {
      const int64_t at = dim < inner ? index[dim] : 0;
      begin += (request.box[dim].first + at) * strides[dim];
    }
    found.clear();
    for (int position = 0; position < layout.group_size(); ++position) {
      IntersectRuns(slices[position], sources[position], location->unit, begin,
                    run, dest, found);
    }
    std::sort(found.begin(), found.end(),
              [](const VersionPiece& a, const VersionPiece& b) {
                return a.dest_element < b.dest_element;
              });
    for (const VersionPiece& piece : found) AppendMerged(plan.pieces, piece);
    for (int dim = inner - 1; dim >= 0; --dim) {  // The next outer index.
      if (++index[dim] < plan.shape[dim]) break;
      index[dim] = 0;
    }
  }
  return plan;
}

std::vector<std::vector<VersionPiece>> CutIntoBatches(
    const std::vector<VersionPiece>& pieces, int64_t max_numel) {
  std::vector<std::vector<VersionPiece>> batches;
  int64_t room = 0;  // Elements the last batch may still take.
  for (VersionPiece piece : pieces) {
    while (piece.numel > 0) {
      if (room == 0) {
        batches.emplace_back();
        room = max_numel;
      }
      const int64_t n = std::min(room, piece.numel);
      batches.back().push_back(VersionPiece{piece.rank, piece.unit,
                                            piece.shard_element, n,
                                            piece.dest_element});
      piece.shard_element += n;
      piece.dest_element += n;
      piece.numel -= n;
      room -= n;
    }
  }
  return batches;
}

std::vector<std::vector<EntryPieces>> ShareAmongCopiers(
    const std::vector<std::vector<VersionPiece>>& pieces,
    const std::vector<int64_t>& element_bytes, int copiers) {
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (const VersionPiece& piece : pieces[i]) {
      total += piece.numel * element_bytes[i];
    }
  }
  const int64_t share = (total + copiers - 1) / copiers;
  std::vector<std::vector<EntryPieces>> shares;
  int64_t room = 0;  // Bytes the last share may still take.
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int entry = static_cast<int>(i);
    const int64_t element = element_bytes[i];
    for (VersionPiece piece : pieces[i]) {
      while (piece.numel > 0) {
        if (room <= 0) {
          shares.emplace_back();
          room = share;
        }
        std::vector<EntryPieces>& runs = shares.back();
        if (runs.empty() || runs.back().entry != entry) {
          runs.push_back(EntryPieces{entry, {}});
        }
        // Whole elements: a share may end up to one element over.
        const int64_t n = std::min(piece.numel, (room + element - 1) / element);
        runs.back().pieces.push_back(VersionPiece{piece.rank, piece.unit,
                                                  piece.shard_element, n,
                                                  piece.dest_element});
        piece.shard_element += n;
        piece.dest_element += n;
        piece.numel -= n;
        room -= n * element;
      }
    }
  }
  return shares;
}

}  // namespace summon::server
