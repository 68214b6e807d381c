// Loading a safetensors checkpoint into a sharded model: every parameter is
// resolved (under its name or a tied alias) before any shard changes, then
// each rank's owned slices are read straight into its shards. Apart from
// checkpoint_save.cc, which writes checkpoints; the two share only
// checkpoint_internal.h.
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpoint_internal.h"
#include "server/checkpoint/safetensors.h"

namespace summon::server {
namespace {

using checkpoint_internal::CheckRanks;

// The holders of every shard position among `ranks`, each listed once.
std::map<int, std::vector<int>> RanksByPosition(const core::ModelSpec& model,
                                                const std::vector<int>& ranks) {
  std::map<int, std::vector<int>> by_position;
  for (int rank : std::set<int>(ranks.begin(), ranks.end())) {
    by_position[model.groups.PositionOf(rank)].push_back(rank);
  }
  return by_position;
}

// The checkpoint tensor holding a primary parameter: under its own name or
// one of its aliases'.
absl::StatusOr<SafetensorsTensorRef> FindStoredTensor(
    const SafetensorsCheckpoint& checkpoint, const core::FlatParamEntry& param,
    const std::vector<std::string>& aliases, bool convert) {
  std::vector<std::string> names = {param.fqn};
  names.insert(names.end(), aliases.begin(), aliases.end());
  for (const std::string& name : names) {
    auto found = checkpoint.by_name.find(name);
    if (found == checkpoint.by_name.end()) continue;
    const SafetensorsTensorRef& tensor = checkpoint.tensors[found->second];
    const SafetensorsEntry& entry = checkpoint.Entry(tensor);
    const bool convertible = convert && core::IsFloatingPoint(entry.dtype);
    if ((entry.dtype != param.dtype && !convertible) ||
        entry.shape != param.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor '", name, "' is ", core::DTypeName(entry.dtype),
          core::ShapeToString(entry.shape), " but parameter '", param.fqn,
          "' is ", core::DTypeName(param.dtype),
          core::ShapeToString(param.shape),
          entry.shape == param.shape ? " (load with dtype to convert)" : ""));
    }
    return tensor;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint has no tensor '", param.fqn, "'",
      aliases.empty() ? ""
                      : absl::StrCat(" (nor its tied aliases '",
                                     absl::StrJoin(aliases, "', '"), "')")));
}

}  // namespace

absl::StatusOr<int64_t> LoadCheckpoint(const std::string& path,
                                       const core::ModelSpec& model,
                                       const std::vector<int>& ranks,
                                       const core::ShardAddress& shard,
                                       bool convert,
                                       const FileAdmission& admit) {
  if (absl::Status checked = CheckRanks(model, ranks); !checked.ok()) {
    return checked;
  }
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(path, admit);
  if (!checkpoint.ok()) return checkpoint.status();
  std::map<std::string, std::vector<std::string>> aliases_of;
  for (const auto& [alias, primary] : model.aliases) {
    aliases_of[primary].push_back(alias);
  }
  // Every parameter is resolved before any shard changes, so a checkpoint
  // that does not fit leaves the shards as they were.
  struct Source {
    int unit;
    int param;
    SafetensorsTensorRef tensor;
  };
  std::vector<Source> sources;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const auto& params = model.units[u].layout.params();
    for (size_t p = 0; p < params.size(); ++p) {
      absl::StatusOr<SafetensorsTensorRef> tensor = FindStoredTensor(
          *checkpoint, params[p], aliases_of[params[p].fqn], convert);
      if (!tensor.ok()) return Labelled(path, tensor.status());
      sources.push_back({static_cast<int>(u), static_cast<int>(p), *tensor});
    }
  }
  const std::map<int, std::vector<int>> holders = RanksByPosition(model, ranks);
  int64_t bytes_read = 0;
  for (const Source& source : sources) {
    const core::FlatParamLayout& layout = model.units[source.unit].layout;
    const int64_t element_size =
        static_cast<int64_t>(core::ElementSize(layout.dtype()));
    const SafetensorsFile& file = checkpoint->files[source.tensor.file];
    const SafetensorsEntry& entry = checkpoint->Entry(source.tensor);
    for (const auto& [position, position_ranks] : holders) {
      const core::ShardSlice slice = layout.SliceOf(source.param, position);
      if (!slice.in_shard) continue;
      const int64_t bytes = slice.numel_in_shard * element_size;
      const int64_t shard_offset = slice.offset_in_shard * element_size;
      uint8_t* first = shard(position_ranks.front(), source.unit);
      const int64_t stored_size =
          static_cast<int64_t>(core::ElementSize(entry.dtype));
      const int64_t stored_bytes = slice.numel_in_shard * stored_size;
      // One read per run (an FSDP2 chunk on a dim > 0 is strided in the
      // file); a slice's runs lie back to back in the shard.
      absl::Status status;
      std::string converted;
      core::ForEachRun(slice, [&](int64_t intra, int64_t in_shard,
                                  int64_t numel) {
        if (!status.ok()) return;
        uint8_t* run = first + in_shard * element_size;
        // Stored as the parameter is: straight into the shard. Otherwise
        // (convert) through a buffer of the stored dtype.
        uint8_t* target = run;
        if (entry.dtype != layout.dtype()) {
          converted.resize(static_cast<size_t>(numel * stored_size));
          target = reinterpret_cast<uint8_t*>(converted.data());
        }
        if (absl::Status read = PreadFully(
                file.fd.get(), target, numel * stored_size,
                file.header.data_start + entry.begin + intra * stored_size);
            !read.ok()) {
          status = Labelled(
              absl::StrCat(file.path, " tensor '", entry.name, "'"), read);
          return;
        }
        if (entry.dtype != layout.dtype()) {
          status = core::ConvertElements(entry.dtype, converted.data(),
                                         layout.dtype(), run, numel);
        }
      });
      if (!status.ok()) return status;
      first += shard_offset;
      bytes_read += stored_bytes;
      for (size_t r = 1; r < position_ranks.size(); ++r) {
        std::memcpy(shard(position_ranks[r], source.unit) + shard_offset, first,
                    static_cast<size_t>(bytes));
      }
    }
  }
  return bytes_read;
}

}  // namespace summon::server
