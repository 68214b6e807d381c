#ifndef SUMMON_SERVER_STORE_SEGMENT_NAMES_H_
#define SUMMON_SERVER_STORE_SEGMENT_NAMES_H_

// What the shard store's shared-memory segments are called and how a
// segment tells which layout it was written for: the segment kinds and
// their name suffixes, the rules for instance and model names (model names
// end up in segment and file names), and the layout fingerprint every
// segment header records. Apart from shard_store.h because none of this
// needs a mapped segment; the ShardStore statics that work on names alone
// (SegmentName, ListSegments, RemoveSegments) are defined in
// segment_names.cc too.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/model_spec.h"

namespace summon::server {

// What a shared-memory segment holds for one rank.
enum class SegmentKind : uint32_t {
  kParams = 1,
  kGrads = 2,
  kStaged = 3,       // Writeback data between PREPARE and COMMIT.
  kStagedGrads = 4,  // The same for gradients.
};

// The last component of a segment's name: "params", "grads", "staged" or
// "stagedgrads".
absl::string_view KindSuffix(SegmentKind kind);

// INVALID_ARGUMENT unless `name` matches [A-Za-z0-9._-]{1,128} and is not "."
// or "..": model names end up in shared-memory segment and file names.
absl::Status ValidateModelName(absl::string_view name);

// INVALID_ARGUMENT unless `instance` matches [A-Za-z0-9]{1,64}: it prefixes
// every segment name of one daemon.
absl::Status ValidateInstance(absl::string_view instance);

// A hash of the layout facts that decide where `rank`'s bytes are in its
// segments and what they mean (units, parameters, dtypes, shapes, offsets,
// the rank's shard position). A segment records it at creation; one found
// with another fingerprint was written for another layout or topology.
uint64_t LayoutFingerprint(const core::ModelSpec& model, int rank);

}  // namespace summon::server

#endif  // SUMMON_SERVER_STORE_SEGMENT_NAMES_H_
