#include "core/scope.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::core {
namespace {

bool ModuleExists(const ModelSpec& model, absl::string_view module_fqn) {
  for (const UnitSpec& unit : model.units) {
    if (IsUnderModule(unit.fqn, module_fqn)) return true;
  }
  for (const auto& [fqn, location] : model.params_by_fqn) {
    if (fqn != module_fqn && IsUnderModule(fqn, module_fqn)) return true;
  }
  return false;
}

Scope ScopeOfUnits(const ModelSpec& model, std::vector<int> units) {
  Scope scope;
  scope.units = std::move(units);
  for (int unit : scope.units) {
    const auto& params = model.units[unit].layout.params();
    for (size_t p = 0; p < params.size(); ++p) {
      scope.params.push_back(
          {ParamLocation{unit, static_cast<int>(p)}, params[p].fqn});
    }
  }
  return scope;
}

absl::StatusOr<Scope> ResolveParamList(const ModelSpec& model,
                                       const ScopeRequest& request) {
  if (!request.module_fqn.empty() || !request.recurse) {
    return absl::InvalidArgumentError(
        "a scope is either a module (with recurse) or a parameter list, not "
        "both");
  }
  std::set<std::pair<int, int>> chosen;
  for (const std::string& fqn : request.params) {
    absl::StatusOr<ParamLocation> location = model.FindParam(fqn);
    if (!location.ok()) return location.status();
    chosen.insert({location->unit, location->param});
  }
  Scope scope;
  for (const auto& [unit, param] : chosen) {
    scope.params.push_back({ParamLocation{unit, param},
                            model.units[unit].layout.params()[param].fqn});
    if (scope.units.empty() || scope.units.back() != unit) {
      scope.units.push_back(unit);
    }
  }
  return scope;
}

// What an empty module scope's warning points at (as FSDP, such a scope
// summons nothing): with recurse=false the units below the module; else the
// unit its parameters live in, and the parameter list that names them.
std::string WhereInstead(const ModelSpec& model, absl::string_view module_fqn,
                         bool recurse) {
  std::vector<std::string> below;
  for (const UnitSpec& unit : model.units) {
    if (IsUnderModule(unit.fqn, module_fqn)) below.push_back(unit.fqn);
  }
  if (!recurse && !below.empty()) {
    return absl::StrCat("; without --no-recurse it holds the units below it (",
                        absl::StrJoin(below, ", "), ")");
  }
  std::set<std::string> owners;
  std::vector<std::string> params;
  for (size_t u = 0; u < model.units.size(); ++u) {
    for (const FlatParamEntry& param : model.units[u].layout.params()) {
      if (!IsUnderModule(param.fqn, module_fqn)) continue;
      owners.insert(model.units[u].fqn);
      params.push_back(param.fqn);
    }
  }
  if (params.empty()) return "";
  std::vector<std::string> scopes;
  for (const std::string& owner : owners) {
    scopes.push_back(absl::StrCat("--scope ", owner.empty() ? "''" : owner));
  }
  return absl::StrCat("; its parameters live in ", absl::StrJoin(scopes, ", "),
                      ", or name just them: --params ",
                      absl::StrJoin(params, ","));
}

}  // namespace

absl::StatusOr<Scope> ResolveScope(const ModelSpec& model,
                                   const ScopeRequest& request) {
  if (!request.params.empty()) return ResolveParamList(model, request);

  const std::string& module_fqn = request.module_fqn;
  if (model.params_by_fqn.count(module_fqn) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", module_fqn,
                     "' is a parameter, not a module: give it as a parameter "
                     "list to summon just that parameter"));
  }
  if (!ModuleExists(model, module_fqn)) {
    return absl::NotFoundError(
        absl::StrCat("no module '", module_fqn, "' in the model"));
  }
  std::vector<int> units;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const std::string& unit_fqn = model.units[u].fqn;
    const bool selected = request.recurse ? IsUnderModule(unit_fqn, module_fqn)
                                          : unit_fqn == module_fqn;
    if (selected) units.push_back(static_cast<int>(u));
  }
  Scope scope = ScopeOfUnits(model, std::move(units));
  if (scope.units.empty()) {
    scope.warnings.push_back(absl::StrCat(
        "module '", module_fqn, "' is not a unit",
        request.recurse ? " and has no unit below it"
                        : " (--no-recurse, recurse=false)",
        ": the session holds no parameters", WhereInstead(model, module_fqn,
                                                          request.recurse)));
  }
  return scope;
}

}  // namespace summon::core
