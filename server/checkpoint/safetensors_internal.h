#ifndef SUMMON_SERVER_CHECKPOINT_SAFETENSORS_INTERNAL_H_
#define SUMMON_SERVER_CHECKPOINT_SAFETENSORS_INTERNAL_H_

// What the two halves of safetensors.h share, safetensors.cc (the file
// format) and safetensors_index.cc (the index and opening a checkpoint):
// strict JSON parsing, the INVALID_ARGUMENT they both report, and opening a
// file for reading past the admission. Kept out of safetensors.h because no
// caller needs it.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/safetensors.h"

namespace summon::server::safetensors_internal {

// Ordered so that "file order" (the header's order) survives parsing and the
// serialized header lists tensors in the order the caller gave.
using Json = nlohmann::ordered_json;

// INVALID_ARGUMENT "<where>: <what>".
absl::Status Invalid(absl::string_view where, absl::string_view what);

// nlohmann silently keeps the last of two equal keys; a header naming a
// tensor twice is ambiguous, so every object's keys are checked as they are
// parsed. `what` labels the error messages. INVALID_ARGUMENT unless `text`
// is a JSON object without duplicate keys.
absl::StatusOr<Json> ParseJsonRejectingDuplicates(absl::string_view text,
                                                  absl::string_view what);

// The field `key` of a JSON object, or nullptr.
const Json* FindField(const Json& object, const char* key);

// Opens `path` read-only and asks `admit` (when given) about it.
absl::StatusOr<ScopedFd> OpenForReading(const std::string& path,
                                        const FileAdmission& admit = nullptr);

}  // namespace summon::server::safetensors_internal

#endif  // SUMMON_SERVER_CHECKPOINT_SAFETENSORS_INTERNAL_H_
