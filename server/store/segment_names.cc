// Segment names and the naming rules (see segment_names.h): the free
// functions declared there and the ShardStore statics that need names alone
// (SegmentName, ListSegments, RemoveSegments), which work without any store.
#include "server/store/segment_names.h"

#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/seeded_init.h"
#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {
namespace {

constexpr char kShmDirectory[] = "/dev/shm";
constexpr size_t kMaxModelNameBytes = 128;
constexpr size_t kMaxInstanceBytes = 64;

// Collects the layout facts that decide where a rank's bytes are and what
// they mean, length-prefixed so that no two layouts serialise alike.
class FingerprintBuilder {
 public:
  void Add(int64_t value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  void Add(absl::string_view text) {
    Add(static_cast<int64_t>(text.size()));
    bytes_.append(text.data(), text.size());
  }
  uint64_t Finish() const { return core::Fnv1a64(bytes_); }

 private:
  std::string bytes_;
};

// "/summon-I-M-r<digits>-<kind>" with the prefix "/summon-I-M-r" given.
bool IsSegmentOfModel(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix)) return false;
  const size_t dash = name.find('-');
  if (dash == 0 || dash == absl::string_view::npos) return false;
  const absl::string_view digits = name.substr(0, dash);
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return absl::ascii_isdigit(c); })) {
    return false;
  }
  const absl::string_view suffix = name.substr(dash + 1);
  for (SegmentKind kind : {SegmentKind::kParams, SegmentKind::kGrads,
                           SegmentKind::kStaged, SegmentKind::kStagedGrads}) {
    if (suffix == KindSuffix(kind)) return true;
  }
  return false;
}

}  // namespace

absl::string_view KindSuffix(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kParams:
      return "params";
    case SegmentKind::kGrads:
      return "grads";
    case SegmentKind::kStaged:
      return "staged";
    case SegmentKind::kStagedGrads:
      return "stagedgrads";
  }
  return "unknown";
}

absl::Status ValidateInstance(absl::string_view instance) {
  const bool valid = !instance.empty() &&
                     instance.size() <= kMaxInstanceBytes &&
                     std::all_of(instance.begin(), instance.end(),
                                 [](char c) { return absl::ascii_isalnum(c); });
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid shard store instance '", instance,
      "': use 1 to 64 letters and digits (it prefixes segment names)"));
}

absl::Status ValidateModelName(absl::string_view name) {
  const bool valid =
      !name.empty() && name.size() <= kMaxModelNameBytes && name != "." &&
      name != ".." && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
      });
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid model name '", name, "': use 1 to ", kMaxModelNameBytes,
      " of A-Z a-z 0-9 . _ - (not '.' or '..')"));
}

uint64_t LayoutFingerprint(const core::ModelSpec& model, int rank) {
  FingerprintBuilder builder;
  builder.Add(static_cast<int64_t>(model.units.size()));
  for (const core::UnitSpec& unit : model.units) {
    const core::FlatParamLayout& layout = unit.layout;
    builder.Add(unit.fqn);
    builder.Add(int64_t{unit.parent});
    builder.Add(core::DTypeName(layout.dtype()));
    builder.Add(int64_t{layout.use_orig_params()});
    builder.Add(int64_t{layout.group_size()});
    builder.Add(layout.unpadded_numel());
    builder.Add(layout.chunk_numel());
    builder.Add(static_cast<int64_t>(layout.params().size()));
    for (const core::FlatParamEntry& param : layout.params()) {
      builder.Add(param.fqn);
      builder.Add(core::DTypeName(param.dtype));
      builder.Add(static_cast<int64_t>(param.shape.size()));
      for (int64_t dim : param.shape) builder.Add(dim);
      builder.Add(param.flat_offset);
      // Only for fsdp2, so flat models keep the fingerprints their existing
      // segments were created with.
      if (layout.kind() == core::LayoutKind::kFsdp2) {
        builder.Add(core::LayoutKindName(layout.kind()));
        builder.Add(int64_t{param.shard_dim});
        builder.Add(param.padded_chunk_numel);
      }
    }
  }
  builder.Add(int64_t{model.groups.PositionOf(rank)});
  return builder.Finish();
}

std::string ShardStore::SegmentName(absl::string_view instance,
                                    absl::string_view model_name, int rank,
                                    SegmentKind kind) {
  return absl::StrCat("/summon-", instance, "-", model_name, "-r", rank, "-",
                      KindSuffix(kind));
}

std::vector<std::string> ShardStore::ListSegments(absl::string_view instance) {
  std::vector<std::string> names;
  if (!ValidateInstance(instance).ok()) return names;
  const std::string prefix = absl::StrCat("summon-", instance, "-");
  DIR* directory = opendir(kShmDirectory);
  if (directory == nullptr) return names;
  while (const dirent* entry = readdir(directory)) {
    if (absl::StartsWith(entry->d_name, prefix)) {
      names.push_back(absl::StrCat("/", entry->d_name));
    }
  }
  closedir(directory);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status ShardStore::RemoveSegments(absl::string_view instance,
                                        absl::string_view model_name) {
  if (absl::Status status = ValidateInstance(instance); !status.ok()) {
    return status;
  }
  if (absl::Status status = ValidateModelName(model_name); !status.ok()) {
    return status;
  }
  const std::string prefix =
      absl::StrCat("/summon-", instance, "-", model_name, "-r");
  absl::Status first_failure;
  for (const std::string& name : ListSegments(instance)) {
    if (IsSegmentOfModel(name, prefix)) first_failure.Update(shm::Unlink(name));
  }
  return first_failure;
}

}  // namespace summon::server
