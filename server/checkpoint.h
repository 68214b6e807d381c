#ifndef SUMMON_SERVER_CHECKPOINT_H_
#define SUMMON_SERVER_CHECKPOINT_H_

// Safetensors checkpoints of a sharded model, read and written straight
// between the files and the ranks' shards: each rank's owned slice of each
// parameter is one pread or pwrite at the right offset, so no full copy of
// the model (or of a tensor) is ever built.
//
// A checkpoint `path` for loading and LayoutJsonFromCheckpoint takes any
// form OpenSafetensorsCheckpoint (server/safetensors.h) accepts.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_spec.h"
#include "core/plan.h"

namespace summon::server {

// Default cap on the tensor bytes of one file of a directory checkpoint.
inline constexpr int64_t kDefaultMaxCheckpointFileBytes = int64_t{2} << 30;

// Reads, for every primary parameter of `model` and every rank in `ranks`,
// that rank's owned slice from the checkpoint into `shard(rank, unit)`.
// Padding is never written. Replicas (NO_SHARD, the hybrid strategies) read
// their shared slice once; the others copy it from the first. A parameter
// may be stored under its own name or, for tied weights, under one of its
// aliases' names (Hugging Face keeps one name of a tied group); tensors the
// model does not know are ignored.
// Everything is validated before the first shard byte is written:
// INVALID_ARGUMENT naming the tensor when a parameter is missing or has
// another dtype or shape, a rank is outside the world, or a file is
// malformed; NOT_FOUND when `path` does not exist. Returns the tensor bytes
// read from the files.
absl::StatusOr<int64_t> LoadCheckpoint(const std::string& path,
                                       const core::ModelSpec& model,
                                       const std::vector<int>& ranks,
                                       const core::ShardAddress& shard);

struct SavedCheckpoint {
  std::vector<std::string> files;  // Paths written; an index comes last.
  int64_t bytes_written = 0;       // Headers, tensor data and index.
};

// Writes the model's primary parameters (full shapes, model order: units in
// order, each unit's parameters in flattening order; aliases are not
// written, as Hugging Face drops tied duplicates) from the shards of `ranks`.
// A `path` ending in ".safetensors" becomes one file; any other path a
// directory (created when missing) receiving model-00001-of-0000N.safetensors
// files of at most `max_file_bytes` tensor bytes each (a larger tensor gets a
// file of its own; tensors are never split) and model.safetensors.index.json.
// Each file is sized with ftruncate, its header written, then every slice
// pwritten from one rank holding that shard position (the lowest in
// `ranks`; replicas hold the same data).
// Files are written under a temporary name, fsynced and renamed into place
// (the index last), so a crash never leaves a partial file under a final
// name. `metadata` goes to every file's "__metadata__" (and the index's
// "metadata"); "format": "pt" is added when absent because transformers
// refuses safetensors metadata without a format.
// INVALID_ARGUMENT when `ranks` leave a shard position uncovered or name a
// rank outside the world, or max_file_bytes < 1; OS errors as ErrnoToStatus.
absl::StatusOr<SavedCheckpoint> SaveCheckpoint(
    const std::string& path, const core::ModelSpec& model,
    const std::vector<int>& ranks, const core::ShardAddress& shard,
    const std::map<std::string, std::string>& metadata,
    int64_t max_file_bytes = kDefaultMaxCheckpointFileBytes);

// What LayoutJsonFromCheckpoint does with tensors of a non-floating dtype
// (int64 position ids, bool masks): such buffers can never be flattened into
// a unit (R14).
enum class NonFloatingTensors {
  kReject,  // INVALID_ARGUMENT naming them: the user decides.
  kSkip,    // Left out of the layout (and so never loaded).
};

// Builds a layout JSON (DESIGN.md section 6) for the checkpoint's tensors.
// Units: every module (a proper dot-prefix of a tensor name) that matches a
// pattern of `wrap_patterns` is a unit; a pattern is a dot-separated module
// path from the root in which a "*" component matches any one component
// ("layers.*" matches layers.0 and layers.17, not model.layers.0 or
// layers.0.mlp). The root unit "" is always present and gets every tensor
// under no matched module; a tensor belongs to the deepest matched module
// above it. Units are listed in the natural order of their names, comparing
// component by component with numeric components as numbers (so "" first,
// parents before children, layers.2 before layers.10). Within a unit the
// parameters keep checkpoint order (by file, then data offset): for files
// written by SaveCheckpoint that is the saved model's flattening order, so
// save, LayoutJsonFromCheckpoint and load reproduce the same shards. Tied
// weights cannot be recovered from a checkpoint (it stores each tensor once),
// so the layout has no aliases.
// INVALID_ARGUMENT for a malformed checkpoint, a malformed pattern, a pattern
// matching no module, non-floating tensors under kReject, or a unit whose
// tensors do not share one dtype (FSDP's one-dtype rule), naming them.
absl::StatusOr<std::string> LayoutJsonFromCheckpoint(
    const std::string& path, const std::vector<std::string>& wrap_patterns,
    core::Strategy strategy, bool use_orig_params,
    NonFloatingTensors non_floating = NonFloatingTensors::kReject);

}  // namespace summon::server

#endif  // SUMMON_SERVER_CHECKPOINT_H_
