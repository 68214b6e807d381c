#ifndef SUMMON_CORE_JSON_ERROR_H_
#define SUMMON_CORE_JSON_ERROR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace summon::core {

// Where and why `text` is not valid JSON: "line 3, column 5: unexpected '}';
// expected string literal" (lines and columns from 1, columns in bytes).
// Empty when `text` is valid JSON.
std::string JsonSyntaxError(absl::string_view text);

// The 1-based line and column of the byte at 0-based `offset` in `text`.
struct TextPosition {
  int line = 1;
  int column = 1;
};
TextPosition PositionOf(absl::string_view text, size_t offset);

// A field of `object` that is not in `known` is a typo or a misunderstanding,
// never something to ignore silently: INVALID_ARGUMENT "WHERE: unknown field
// 'K' (did you mean 'C'?); known: ..." for the first one; OK when none.
absl::Status CheckKnownFields(const nlohmann::json& object,
                              absl::string_view where,
                              const std::vector<std::string>& known);

}  // namespace summon::core

#endif  // SUMMON_CORE_JSON_ERROR_H_
