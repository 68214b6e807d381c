// LayoutJsonFromCheckpoint: a model layout derived from a checkpoint's
// tensors (units by wrap patterns, FSDP's one-dtype rule, R14), for a load
// that creates the model. checkpoint_load.cc loads the shards and
// checkpoint_save.cc saves them.

#include <regex.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/safetensors.h"

namespace summon::server {
namespace {

// A POSIX extended regular expression (regcomp), searched in names. The C
// library's, not std::regex: no exceptions, and no template code whose
// inlining trips gcc's -Wmaybe-uninitialized in the sanitizer builds.
class NamePattern {
 public:
  static absl::StatusOr<std::unique_ptr<NamePattern>> Compile(
      const std::string& pattern) {
    auto compiled = std::unique_ptr<NamePattern>(new NamePattern());
    if (regcomp(&compiled->regex_, pattern.c_str(), REG_EXTENDED | REG_NOSUB) !=
        0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "skip '", pattern, "' is not a POSIX extended regular expression"));
    }
    compiled->compiled_ = true;
    return compiled;
  }
  NamePattern(const NamePattern&) = delete;
  NamePattern& operator=(const NamePattern&) = delete;
  ~NamePattern() {
    if (compiled_) regfree(&regex_);
  }
  bool Found(const std::string& name) const {
    return regexec(&regex_, name.c_str(), 0, nullptr, 0) == 0;
  }

 private:
  NamePattern() = default;
  regex_t regex_;
  bool compiled_ = false;
};

using ModulePath = std::vector<std::string>;

// The components of a dot-separated name; nullopt when one is empty.
std::optional<ModulePath> SplitName(absl::string_view name) {
  ModulePath parts = absl::StrSplit(name, '.');
  for (const std::string& part : parts) {
    if (part.empty()) return std::nullopt;
  }
  return parts;
}

// Does the module made of the first `length` components of `name` match
// `pattern`?
bool MatchesPattern(const ModulePath& pattern, const ModulePath& name,
                    size_t length) {
  if (pattern.size() != length) return false;
  for (size_t i = 0; i < length; ++i) {
    if (pattern[i] != "*" && pattern[i] != name[i]) return false;
  }
  return true;
}

bool IsNumber(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(c);
  });
}

// Component by component; numbers as numbers (by length, then digits), so
// layers.2 < layers.10; a module before the modules below it.
bool NaturalLess(const ModulePath& a, const ModulePath& b) {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [](const std::string& x, const std::string& y) {
        if (IsNumber(x) && IsNumber(y) && x.size() != y.size()) {
          return x.size() < y.size();
        }
        return x < y;
      });
}

}  // namespace

absl::StatusOr<std::string> LayoutJsonFromCheckpoint(
    const std::string& path, const std::vector<std::string>& wrap_patterns,
    core::Strategy strategy, bool use_orig_params,
    NonFloatingTensors non_floating, const std::string& skip,
    std::optional<core::DType> cast_to, const FileAdmission& admit) {
  std::unique_ptr<NamePattern> skipped;
  if (!skip.empty()) {
    absl::StatusOr<std::unique_ptr<NamePattern>> compiled =
        NamePattern::Compile(skip);
    if (!compiled.ok()) return compiled.status();
    skipped = *std::move(compiled);
  }
  if (cast_to.has_value() && !core::IsFloatingPoint(*cast_to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cast parameters to ", core::DTypeName(*cast_to),
                     ": only floating-point dtypes (R14)"));
  }
  std::vector<ModulePath> patterns;
  for (const std::string& pattern : wrap_patterns) {
    std::optional<ModulePath> parts = SplitName(pattern);
    if (!parts.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "wrap pattern '", pattern,
          "' is not a dot-separated module path with non-empty components"));
    }
    patterns.push_back(*std::move(parts));
  }
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(path, admit);
  if (!checkpoint.ok()) return checkpoint.status();

  std::vector<std::string> non_floating_names;
  // Unit FQN -> its tensors (indices into checkpoint->tensors), in order.
  std::map<std::string, std::vector<int>> units = {{"", {}}};
  std::vector<bool> pattern_used(patterns.size(), false);
  for (size_t t = 0; t < checkpoint->tensors.size(); ++t) {
    const SafetensorsEntry& entry = checkpoint->Entry(checkpoint->tensors[t]);
    if (skipped != nullptr && skipped->Found(entry.name)) {
      continue;
    }
    if (!core::IsFloatingPoint(entry.dtype)) {
      non_floating_names.push_back(absl::StrCat(
          "'", entry.name, "' (", core::DTypeName(entry.dtype), ")"));
      continue;
    }
    std::optional<ModulePath> parts = SplitName(entry.name);
    if (!parts.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", entry.name,
                       "' is not a dot-separated name"));
    }
    std::string unit;  // The deepest matched module; "" when none.
    for (size_t length = 1; length < parts->size(); ++length) {
      for (size_t p = 0; p < patterns.size(); ++p) {
        if (!MatchesPattern(patterns[p], *parts, length)) continue;
        pattern_used[p] = true;
        unit = absl::StrJoin(parts->begin(), parts->begin() + length, ".");
        units[unit];  // A matched module is a unit even without own tensors.
      }
    }
    units[unit].push_back(static_cast<int>(t));
  }
  if (!non_floating_names.empty() &&
      non_floating == NonFloatingTensors::kReject) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensors ", absl::StrJoin(non_floating_names, ", "),
        " are not floating point and cannot be flattened into a unit (R14); "
        "load with skip (summonctl model load --skip REGEX) to leave them "
        "out"));
  }
  for (size_t p = 0; p < patterns.size(); ++p) {
    if (!pattern_used[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("wrap pattern '", wrap_patterns[p], "' matches no ",
                       "module of checkpoint '", path, "'"));
    }
  }

  std::vector<std::pair<ModulePath, std::string>> unit_order;
  for (const auto& [fqn, tensors] : units) {
    // No root unit without tensors of its own: its shard would be zero
    // bytes long, which breaks a plain mmap of it in a trainer.
    if (fqn.empty() && tensors.empty()) continue;
    unit_order.emplace_back(fqn.empty() ? ModulePath() : *SplitName(fqn), fqn);
  }
  std::sort(unit_order.begin(), unit_order.end(),
            [](const auto& a, const auto& b) {
              return NaturalLess(a.first, b.first);
            });
  // FSDP flattens one dtype per unit: a unit mixing them is refused with the
  // load that would work (cast everything to the unit's most common dtype).
  if (!cast_to.has_value()) {
    for (const auto& [parts, fqn] : unit_order) {
      std::map<core::DType, std::vector<std::string>> by_dtype;
      for (int t : units[fqn]) {
        const SafetensorsEntry& entry =
            checkpoint->Entry(checkpoint->tensors[t]);
        by_dtype[entry.dtype].push_back(entry.name);
      }
      if (by_dtype.size() < 2) continue;
      std::vector<std::string> mix;
      core::DType most = by_dtype.begin()->first;
      for (const auto& [dtype, names] : by_dtype) {
        mix.push_back(absl::StrCat(core::DTypeName(dtype), " ('", names.front(),
                                   "'", names.size() > 1 ? ", ..." : "", ")"));
        if (names.size() > by_dtype[most].size()) most = dtype;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": unit '", fqn, "' mixes ", absl::StrJoin(mix, " and "),
          "; FSDP flattens one dtype per unit. Load with dtype ",
          core::DTypeName(most),
          " to convert every parameter (summonctl "
          "model load M --from PATH --wrap '",
          absl::StrJoin(wrap_patterns, ","), "' --dtype ",
          core::DTypeName(most),
          "), or wrap the other dtype's "
          "modules as units of their own"));
    }
  }
  using Json = nlohmann::ordered_json;
  Json unit_list = Json::array();
  for (const auto& [parts, fqn] : unit_order) {
    Json params = Json::array();
    for (int t : units[fqn]) {
      const SafetensorsEntry& entry = checkpoint->Entry(checkpoint->tensors[t]);
      params.push_back({{"fqn", entry.name},
                        {"shape", entry.shape},
                        {"dtype", std::string(core::DTypeName(
                                      cast_to.value_or(entry.dtype)))}});
    }
    unit_list.push_back({{"fqn", fqn}, {"params", std::move(params)}});
  }
  Json layout = Json::object();
  layout["strategy"] = std::string(core::StrategyName(strategy));
  layout["use_orig_params"] = use_orig_params;
  layout["units"] = std::move(unit_list);
  std::string text = layout.dump(2, ' ', /*ensure_ascii=*/false,
                                 Json::error_handler_t::replace);
  // The daemon's own parser has the last word (one dtype per unit, a tensor
  // named like a unit), so a layout returned here is one it accepts.
  if (absl::StatusOr<core::ModelSpec> parsed =
          core::ParseModelLayout(text, core::Topology{});
      !parsed.ok()) {
    return Labelled(path, parsed.status());
  }
  return text;
}

}  // namespace summon::server
