#include "core/model_spec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/json_error.h"

namespace summon::core {
namespace {

using Json = nlohmann::json;

// Half of int64 leaves ample room for alignment and end padding.
constexpr int64_t kMaxUnitNumel = std::numeric_limits<int64_t>::max() / 2;

// A module path: "" (the root) or dot-separated non-empty components.
bool IsWellFormedModulePath(absl::string_view fqn) {
  if (fqn.empty()) return true;
  if (fqn.front() == '.' || fqn.back() == '.') return false;
  return fqn.find("..") == absl::string_view::npos;
}

// The modules strictly above `fqn`, shallowest first: "" then every proper
// dot-prefix ("a.b.c" -> "", "a", "a.b"). Walking these and looking each up
// keeps the tree checks linear in the number of units and parameters.
std::vector<absl::string_view> ModulesAbove(absl::string_view fqn) {
  std::vector<absl::string_view> modules;
  if (fqn.empty()) return modules;
  modules.push_back(absl::string_view());
  for (size_t dot = fqn.find('.'); dot != absl::string_view::npos;
       dot = fqn.find('.', dot + 1)) {
    modules.push_back(fqn.substr(0, dot));
  }
  return modules;
}

std::string UnitName(absl::string_view fqn) {
  return absl::StrCat("unit '", fqn, "'");
}

// Looks up `key` in `object`; nullptr when absent. `object` is known to be a
// JSON object, so find() cannot throw.
const Json* FindField(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

absl::Status FieldError(absl::string_view where, const char* key,
                        absl::string_view expected, const Json* value) {
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": field '", key, "' ",
      value == nullptr ? "is missing"
                       : absl::StrCat("has JSON type ", value->type_name()),
      ", expected ", expected));
}

// A required (or, with `fallback`, optional) string field.
absl::StatusOr<std::string> StringField(
    const Json& object, const char* key, absl::string_view where,
    std::optional<absl::string_view> fallback = std::nullopt) {
  const Json* value = FindField(object, key);
  if (value == nullptr && fallback.has_value()) return std::string(*fallback);
  if (value == nullptr || !value->is_string()) {
    return FieldError(where, key, "a string", value);
  }
  return value->get_ref<const std::string&>();
}

absl::StatusOr<Shape> ParseShape(const Json& param, absl::string_view where) {
  const Json* value = FindField(param, "shape");
  if (value == nullptr || !value->is_array()) {
    return FieldError(where, "shape", "an array of integers", value);
  }
  Shape shape;
  for (const Json& dim : *value) {
    if (dim.is_number_unsigned()) {
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": shape dimension ", size, " does not fit in int64"));
      }
      shape.push_back(static_cast<int64_t>(size));
    } else if (dim.is_number_integer()) {
      shape.push_back(dim.get<int64_t>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape has a non-integer dimension (JSON type ",
                       dim.type_name(), ")"));
    }
  }
  return shape;
}

// One "params" entry as written: a primary (shape, dtype) or an alias.
struct ParamEntry {
  std::string fqn;
  std::optional<std::string> alias_of;
  Shape shape;
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  std::optional<int64_t> shard_dim;  // As written; checked against the kind.
};

struct UnitEntry {
  std::string fqn;
  std::vector<ParamEntry> params;
};

absl::StatusOr<ParamEntry> ParseParamEntry(const Json& param,
                                           absl::string_view unit_where,
                                           size_t index) {
  const std::string slot = absl::StrCat(unit_where, " params[", index, "]");
  if (!param.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        slot, " has JSON type ", param.type_name(), ", expected an object"));
  }
  ParamEntry entry;
  absl::StatusOr<std::string> fqn = StringField(param, "fqn", slot);
  if (!fqn.ok()) return fqn.status();
  entry.fqn = *std::move(fqn);
  const std::string where = absl::StrCat("parameter '", entry.fqn, "'");
  if (absl::Status known = CheckKnownFields(
          param, where, {"fqn", "shape", "dtype", "alias_of", "shard_dim"});
      !known.ok()) {
    return known;
  }
  if (entry.fqn.empty() || !IsWellFormedModulePath(entry.fqn)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " in ", unit_where,
                     " is not a dot-separated name with non-empty components"));
  }
  if (const Json* alias_of = FindField(param, "alias_of")) {
    if (!alias_of->is_string()) {
      return FieldError(where, "alias_of", "a string", alias_of);
    }
    if (FindField(param, "shape") != nullptr ||
        FindField(param, "dtype") != nullptr ||
        FindField(param, "shard_dim") != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          " is an alias: its shape, dtype and shard_dim are its primary's "
          "and must not be given"));
    }
    entry.alias_of = alias_of->get_ref<const std::string&>();
    return entry;
  }
  absl::StatusOr<Shape> shape = ParseShape(param, where);
  if (!shape.ok()) return shape.status();
  entry.shape = *std::move(shape);
  absl::StatusOr<int64_t> numel = NumElements(entry.shape);
  if (!numel.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", numel.status().message()));
  }
  entry.numel = *numel;
  absl::StatusOr<std::string> dtype_name = StringField(param, "dtype", where);
  if (!dtype_name.ok()) return dtype_name.status();
  absl::StatusOr<DType> dtype = ParseDType(*dtype_name);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", dtype.status().message()));
  }
  entry.dtype = *dtype;  // R14 and the one-dtype rule: FlatParamLayout.
  if (const Json* dim = FindField(param, "shard_dim")) {
    if (!dim->is_number_integer()) {
      return FieldError(where, "shard_dim", "an integer", dim);
    }
    entry.shard_dim = dim->get<int64_t>();
  }
  return entry;
}

absl::StatusOr<std::vector<UnitEntry>> ParseUnitEntries(const Json& units) {
  std::vector<UnitEntry> entries;
  for (size_t u = 0; u < units.size(); ++u) {
    const Json& unit = units[u];
    const std::string slot = absl::StrCat("units[", u, "]");
    if (!unit.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          slot, " has JSON type ", unit.type_name(), ", expected an object"));
    }
    UnitEntry entry;
    absl::StatusOr<std::string> fqn = StringField(unit, "fqn", slot);
    if (!fqn.ok()) return fqn.status();
    entry.fqn = *std::move(fqn);
    const std::string where = UnitName(entry.fqn);
    if (absl::Status known = CheckKnownFields(unit, where, {"fqn", "params"});
        !known.ok()) {
      return known;
    }
    if (!IsWellFormedModulePath(entry.fqn)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       " is not \"\" or a dot-separated name with non-empty "
                       "components"));
    }
    const Json* params = FindField(unit, "params");
    if (params == nullptr || !params->is_array()) {
      return FieldError(where, "params", "an array", params);
    }
    for (size_t p = 0; p < params->size(); ++p) {
      absl::StatusOr<ParamEntry> param =
          ParseParamEntry((*params)[p], where, p);
      if (!param.ok()) return param.status();
      entry.params.push_back(*std::move(param));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

// Fills units[].fqn and units[].parent, refusing duplicates and a unit listed
// after one of its descendants. `index_by_fqn` receives every unit.
absl::Status BuildUnitTree(
    const std::vector<UnitEntry>& entries,
    std::map<std::string, int, std::less<>>& index_by_fqn,
    std::vector<UnitSpec>& units) {
  for (size_t u = 0; u < entries.size(); ++u) {
    if (!index_by_fqn.emplace(entries[u].fqn, static_cast<int>(u)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate ", UnitName(entries[u].fqn)));
    }
  }
  units.resize(entries.size());
  for (size_t u = 0; u < entries.size(); ++u) {
    units[u].fqn = entries[u].fqn;
    for (absl::string_view module : ModulesAbove(entries[u].fqn)) {
      auto ancestor = index_by_fqn.find(module);
      if (ancestor == index_by_fqn.end()) continue;
      if (ancestor->second > static_cast<int>(u)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unit order: ", UnitName(module),
            " is listed after its descendant ", UnitName(entries[u].fqn),
            " (list parents before children)"));
      }
      units[u].parent = ancestor->second;  // Deepest ancestor wins.
    }
  }
  return absl::OkStatus();
}

// A parameter belongs to its unit and to no unit below it.
absl::Status CheckPlacement(
    absl::string_view param, absl::string_view unit,
    const std::map<std::string, int, std::less<>>& index_by_fqn) {
  if (!IsUnderModule(param, unit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", param, "' is not under its ", UnitName(unit)));
  }
  std::vector<absl::string_view> modules = ModulesAbove(param);
  modules.push_back(param);
  for (absl::string_view module : modules) {
    if (module.size() <= unit.size()) continue;  // `unit` or above it.
    if (index_by_fqn.find(module) != index_by_fqn.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", param, "' is listed in ", UnitName(unit),
                       " but falls under the deeper ", UnitName(module)));
    }
  }
  return absl::OkStatus();
}

// The shard dim as FlatParamLayout takes it: absent means 0; a negative one
// counts from the end, as torch's Shard(dim) does; only fsdp2 has one.
absl::StatusOr<int> ShardDimOf(const ParamEntry& param, LayoutKind kind) {
  if (!param.shard_dim.has_value()) return 0;
  if (kind != LayoutKind::kFsdp2) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", param.fqn,
                     "': shard_dim is only for kind fsdp2 (a flat parameter "
                     "is chunked as a whole)"));
  }
  const int64_t ndim = static_cast<int64_t>(param.shape.size());
  const int64_t dim = *param.shard_dim < 0 ? *param.shard_dim + ndim
                                           : *param.shard_dim;
  if (dim < 0 || dim >= std::max<int64_t>(ndim, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", param.fqn, "': shard_dim ", *param.shard_dim,
        " is invalid for its ", ndim, "-d shape ",
        ShapeToString(param.shape)));
  }
  return static_cast<int>(dim);
}

// The size of the process group FSDP1 gives a flat parameter: the shard
// group, except under NO_SHARD, which keeps the whole world's group (and so
// its end padding) while every rank holds everything.
int FlatProcessGroupSize(const ShardGroups& groups) {
  return groups.declared == Strategy::kNoShard ? groups.topology.world_size()
                                               : groups.group_size;
}

}  // namespace

bool IsUnderModule(absl::string_view fqn, absl::string_view module) {
  if (module.empty()) return true;
  if (fqn.size() < module.size() || fqn.substr(0, module.size()) != module) {
    return false;
  }
  return fqn.size() == module.size() || fqn[module.size()] == '.';
}

absl::StatusOr<ParamLocation> ModelSpec::FindParam(
    absl::string_view fqn) const {
  auto it = params_by_fqn.find(std::string(fqn));
  if (it == params_by_fqn.end()) {
    return absl::NotFoundError(absl::StrCat("unknown parameter '", fqn, "'"));
  }
  return it->second;
}

absl::StatusOr<int> ModelSpec::FindUnit(absl::string_view fqn) const {
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].fqn == fqn) return static_cast<int>(u);
  }
  return absl::NotFoundError(absl::StrCat("unknown ", UnitName(fqn)));
}

absl::StatusOr<ModelSpec> ParseModelLayout(
    absl::string_view json, const Topology& topology,
    std::optional<Strategy> strategy_override) {
  const Json root = Json::parse(json.begin(), json.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout is not valid JSON: ", JsonSyntaxError(json)));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout has JSON type ", root.type_name(), ", expected an object"));
  }
  if (absl::Status known = CheckKnownFields(
          root, "layout",
          {"strategy", "kind", "use_orig_params", "compute_dtype",
           "shard_group_size", "units"});
      !known.ok()) {
    return known;
  }
  ModelSpec spec;
  // The file's strategy is validated even when overridden: a typo in the file
  // is still a broken file.
  absl::StatusOr<std::string> strategy_name =
      StringField(root, "strategy", "layout", "FULL_SHARD");
  if (!strategy_name.ok()) return strategy_name.status();
  absl::StatusOr<Strategy> file_strategy = ParseStrategy(*strategy_name);
  if (!file_strategy.ok()) return file_strategy.status();
  spec.strategy = strategy_override.value_or(*file_strategy);

  absl::StatusOr<std::string> kind_name =
      StringField(root, "kind", "layout", "flat");
  if (!kind_name.ok()) return kind_name.status();
  absl::StatusOr<LayoutKind> kind = ParseLayoutKind(*kind_name);
  if (!kind.ok()) return kind.status();
  spec.kind = *kind;
  if (spec.kind == LayoutKind::kFsdp2) {
    // FSDP2 always keeps the original parameters and its mixed precision
    // changes only the all-gather, never the stored shard.
    for (const char* key : {"use_orig_params", "compute_dtype"}) {
      if (FindField(root, key) != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layout: field '", key, "' has no meaning for kind fsdp2"));
      }
    }
  }
  std::optional<int> shard_group_size;
  if (const Json* size = FindField(root, "shard_group_size")) {
    if (!size->is_number_integer() || size->get<int64_t>() < 1 ||
        size->get<int64_t>() > std::numeric_limits<int>::max()) {
      return FieldError("layout", "shard_group_size", "a positive integer",
                        size);
    }
    shard_group_size = static_cast<int>(size->get<int64_t>());
  }

  if (const Json* orig = FindField(root, "use_orig_params")) {
    if (!orig->is_boolean()) {
      return FieldError("layout", "use_orig_params", "a boolean", orig);
    }
    spec.use_orig_params = orig->get<bool>();
  }
  if (const Json* compute = FindField(root, "compute_dtype")) {
    if (!compute->is_string()) {
      return FieldError("layout", "compute_dtype", "a string", compute);
    }
    absl::StatusOr<DType> dtype =
        ParseDType(compute->get_ref<const std::string&>());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("compute_dtype: ", dtype.status().message()));
    }
    if (!IsFloatingPoint(*dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("compute_dtype '", DTypeName(*dtype),
                       "' is not a floating-point dtype"));
    }
    spec.compute_dtype = *dtype;
  }
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(spec.strategy, topology, shard_group_size);
  if (!groups.ok()) return groups.status();
  spec.groups = *std::move(groups);

  const Json* units = FindField(root, "units");
  if (units == nullptr || !units->is_array()) {
    return FieldError("layout", "units", "an array", units);
  }
  if (units->empty()) {
    return absl::InvalidArgumentError(
        "layout: units lists no unit (a model has at least one, e.g. the root "
        "unit \"\" holding every parameter)");
  }
  absl::StatusOr<std::vector<UnitEntry>> entries = ParseUnitEntries(*units);
  if (!entries.ok()) return entries.status();
  std::map<std::string, int, std::less<>> unit_index;
  if (absl::Status tree = BuildUnitTree(*entries, unit_index, spec.units);
      !tree.ok()) {
    return tree;
  }

  // Aliases may resolve only to parameters listed before them, so the walk
  // below sees primaries in the same order as the file. An alias of an alias
  // resolves to the primary.
  std::map<std::string, std::string> primary_of;  // Every parameter so far.
  for (size_t u = 0; u < entries->size(); ++u) {
    const UnitEntry& entry = (*entries)[u];
    std::vector<FlatParamInput> primaries;
    int64_t unit_numel = 0;
    for (const ParamEntry& param : entry.params) {
      if (absl::Status placed =
              CheckPlacement(param.fqn, entry.fqn, unit_index);
          !placed.ok()) {
        return placed;
      }
      std::string primary = param.fqn;
      if (param.alias_of.has_value()) {
        auto target = primary_of.find(*param.alias_of);
        if (target == primary_of.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "alias '", param.fqn, "': alias_of '", *param.alias_of,
              "' names no parameter listed before it"));
        }
        primary = target->second;
      } else {
        // Each numel fits int64; keep the sum and its alignment and end
        // padding indexable too.
        if (param.numel > kMaxUnitNumel - unit_numel) {
          return absl::InvalidArgumentError(
              absl::StrCat(UnitName(entry.fqn), " with parameter '", param.fqn,
                           "' holds more elements than int64 can index"));
        }
        unit_numel += param.numel;
        absl::StatusOr<int> shard_dim = ShardDimOf(param, spec.kind);
        if (!shard_dim.ok()) return shard_dim.status();
        primaries.push_back({param.fqn, param.shape, param.dtype, *shard_dim});
      }
      if (!primary_of.emplace(param.fqn, primary).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate parameter '", param.fqn, "'"));
      }
      if (param.alias_of.has_value()) spec.aliases[param.fqn] = primary;
    }
    absl::StatusOr<FlatParamLayout> layout =
        spec.kind == LayoutKind::kFsdp2
            ? FlatParamLayout::BuildFsdp2(primaries, spec.groups.group_size)
            : FlatParamLayout::Build(primaries, spec.use_orig_params,
                                     spec.groups.group_size,
                                     spec.compute_dtype,
                                     FlatProcessGroupSize(spec.groups));
    if (!layout.ok()) {
      return absl::Status(
          layout.status().code(),
          absl::StrCat(UnitName(entry.fqn), ": ", layout.status().message()));
    }
    spec.units[u].layout = *std::move(layout);
    for (const FlatParamInput& primary : primaries) {
      spec.params_by_fqn[primary.fqn] = ParamLocation{
          static_cast<int>(u), spec.units[u].layout.FindParam(primary.fqn)};
    }
  }
  for (const auto& [alias, primary] : spec.aliases) {
    spec.params_by_fqn[alias] = spec.params_by_fqn.at(primary);
  }
  return spec;
}

}  // namespace summon::core
