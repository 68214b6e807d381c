#ifndef SUMMON_CORE_SCOPE_H_
#define SUMMON_CORE_SCOPE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_spec.h"

namespace summon::core {

// What a client asks to summon: a module (FSDP-style, with recurse) or an
// explicit list of parameter FQNs (DeepSpeed-style).
struct ScopeRequest {
  std::string module_fqn;  // "" is the root module.
  bool recurse = true;
  // When non-empty, exactly these parameters (aliases resolve to their
  // primary); module_fqn must then be "" and recurse true.
  std::vector<std::string> params;
};

struct ScopedParam {
  ParamLocation location;
  std::string fqn;  // The primary's FQN.
};

// The resolved (unit, parameter) set in the one global order every node
// computes identically: by unit index, then by flattening order.
struct Scope {
  std::vector<ScopedParam> params;
  std::vector<int> units;  // Ascending unit indices touched by `params`.
  std::vector<std::string> warnings;
};

// NOT_FOUND for an unknown module or parameter (R11); INVALID_ARGUMENT for a
// request mixing a module scope with a parameter list, or naming a parameter
// as a module. A module that is not a unit (recurse=false), or that has no
// unit at or below it, resolves to an empty scope with a warning: FSDP makes
// that a silent no-op, summon says so.
absl::StatusOr<Scope> ResolveScope(const ModelSpec& model,
                                   const ScopeRequest& request);

}  // namespace summon::core

#endif  // SUMMON_CORE_SCOPE_H_
