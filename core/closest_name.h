#ifndef SUMMON_CORE_CLOSEST_NAME_H_
#define SUMMON_CORE_CLOSEST_NAME_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace summon::core {

// Levenshtein distance: the fewest single-character insertions, deletions
// and substitutions that turn `a` into `b`.
size_t EditDistance(absl::string_view a, absl::string_view b);

// The name of `names` closest to a mistyped `typed`, for a "did you mean":
// within max(2, a third of `typed`'s length) edits (Levenshtein), or one
// that `typed` (3 characters or more) begins; the first of equally close
// ones. "" when none is close, or when `typed` is itself in `names`.
std::string ClosestName(absl::string_view typed,
                        const std::vector<std::string>& names);

}  // namespace summon::core

#endif  // SUMMON_CORE_CLOSEST_NAME_H_
