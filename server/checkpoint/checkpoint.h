#ifndef SUMMON_SERVER_CHECKPOINT_CHECKPOINT_H_
#define SUMMON_SERVER_CHECKPOINT_CHECKPOINT_H_

// Safetensors checkpoints of a sharded model, read and written straight
// between the files and the ranks' shards: each rank's owned slice of each
// parameter is one pread or pwrite at the right offset, so no full copy of
// the model (or of a tensor) is ever built.
//
// A checkpoint `path` for loading and LayoutJsonFromCheckpoint takes any
// form OpenSafetensorsCheckpoint (server/checkpoint/safetensors.h) accepts.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "server/checkpoint/safetensors.h"

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
// malformed; NOT_FOUND when `path` does not exist. With `convert`, a
// floating tensor of another dtype than its parameter is converted while it
// is read (round to nearest even) instead of refused. Returns the tensor
// bytes read from the files.
// `admit` vets every file opened (FileAdmission in safetensors.h).
absl::StatusOr<int64_t> LoadCheckpoint(const std::string& path,
                                       const core::ModelSpec& model,
                                       const std::vector<int>& ranks,
                                       const core::ShardAddress& shard,
                                       bool convert = false,
                                       const FileAdmission& admit = nullptr);

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
// It is PlanCheckpoint, CreateCheckpointFiles, the writes and
// CommitCheckpointFiles in one process (AbandonCheckpointFiles on failure).
absl::StatusOr<SavedCheckpoint> SaveCheckpoint(
    const std::string& path, const core::ModelSpec& model,
    const std::vector<int>& ranks, const core::ShardAddress& shard,
    const std::map<std::string, std::string>& metadata,
    int64_t max_file_bytes = kDefaultMaxCheckpointFileBytes,
    const FileAdmission& admit = nullptr);

// A save split across the nodes of a cluster that share one filesystem, each
// holding only its local ranks' shards:
//   1. every node: plan = PlanCheckpoint(same arguments) -- no I/O, and every
//      node computes the same plan;
//   2. the leader: CreateCheckpointFiles(plan);
//   3. every node, once step 2 is done: WriteCheckpointRanges(plan, model,
//      its local ranks, shard);
//   4. the leader, once every node succeeded and their returned bytes sum to
//      plan.tensor_bytes: CommitCheckpointFiles(plan); on any failure
//      instead AbandonCheckpointFiles(plan).
// Until step 4 nothing exists under a final name. The temporary names derive
// from `path` alone, so two saves to one path must not overlap. Nodes pwrite
// disjoint byte ranges of the same files concurrently: the shared
// filesystem must keep such writes apart, as POSIX write semantics do.

inline constexpr absl::string_view kCheckpointPartialSuffix = ".summon-partial";

// One file of a planned checkpoint: written as `temp_path` (the final path
// plus kCheckpointPartialSuffix, so every node derives the same name) and
// renamed to `path` by the commit.
struct PlannedCheckpointFile {
  std::string path;
  std::string temp_path;
  // A tensor file's serialized header (its data starts right after it); the
  // index's whole text.
  std::string head;
  int64_t size = 0;  // The whole file.
};

// Where a primary parameter's bytes go.
struct PlannedCheckpointTensor {
  core::ParamLocation location;
  int file = 0;             // Index in CheckpointFiles::files.
  int64_t data_offset = 0;  // Absolute offset of its first byte in the file.
};

struct CheckpointFiles {
  // Holds the files: created by CreateCheckpointFiles in the directory form
  // (a single file's directory must exist), fsynced by the commit. Empty for
  // a bare file name (the working directory).
  std::string directory;
  std::vector<PlannedCheckpointFile> files;      // Tensor files, in order.
  std::vector<PlannedCheckpointTensor> tensors;  // Model order.
  std::optional<PlannedCheckpointFile> index;    // Directory form only.
  int64_t tensor_bytes = 0;  // What the writes of all nodes add up to.
  // Vets (FileAdmission) the directory each file is created and renamed in
  // (the creates and renames then go relative to that open directory) and
  // each temporary file a writer opens: the daemon's keeps them beneath a
  // checkpoint root even if a symlink is swapped into the path after it was
  // resolved. Null: anywhere.
  FileAdmission admit = nullptr;
};

// The files SaveCheckpoint would write for these arguments, and where each
// tensor's bytes go in them. Deterministic and free of I/O.
// INVALID_ARGUMENT when max_file_bytes < 1.
absl::StatusOr<CheckpointFiles> PlanCheckpoint(
    const std::string& path, const core::ModelSpec& model,
    const std::map<std::string, std::string>& metadata,
    int64_t max_file_bytes = kDefaultMaxCheckpointFileBytes,
    const FileAdmission& admit = nullptr);

// Leader only: creates the directory (directory form), then every temporary
// tensor file (replacing a stale one), sized with ftruncate, its header
// written and fsynced. OS errors as ErrnoToStatus, naming the file.
absl::Status CreateCheckpointFiles(const CheckpointFiles& plan);

// Any node: pwrites into the existing temporary files the slices of the shard
// positions whose designated writer is in `ranks`: the lowest global rank
// holding that position (under FULL_SHARD every position's only rank; under
// NO_SHARD and the hybrid strategies the first replica, so the node of rank
// 0 writes everything). Ranks are hosted by exactly one node, so when every
// node passes its local ranks each tensor byte is written exactly once. Every
// file is checked against the plan first and fsynced after, so the leader
// commits durable data. Returns the tensor bytes written. INVALID_ARGUMENT for
// a rank outside the world; NOT_FOUND when a temporary file does not exist
// (yet); FAILED_PRECONDITION when one does not start with the planned header (a
// node planned with another model or metadata).
absl::StatusOr<int64_t> WriteCheckpointRanges(const CheckpointFiles& plan,
                                              const core::ModelSpec& model,
                                              const std::vector<int>& ranks,
                                              const core::ShardAddress& shard);

// Leader only: renames every temporary tensor file into place (their bytes
// are durable: fsynced by CreateCheckpointFiles and by each writer), writes
// the index (directory form) under its temporary name, fsyncs and renames it,
// last, and fsyncs the directory. A failure may leave some files renamed.
absl::StatusOr<SavedCheckpoint> CommitCheckpointFiles(
    const CheckpointFiles& plan);

// Removes the temporary files of `plan` that exist (after a failed step);
// final files are left alone.
void AbandonCheckpointFiles(const CheckpointFiles& plan);

// What LayoutJsonFromCheckpoint does with tensors of a non-floating dtype
// (int64 position ids, bool masks): such buffers can never be flattened into
// a unit (R14).
enum class NonFloatingTensors {
  kReject,  // INVALID_ARGUMENT naming them: the user decides.
  kSkip,    // Left out of the layout (and so never loaded).
};

// Builds a layout JSON (docs/design.md#the-layout-file) for the checkpoint's
// tensors.
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
// INVALID_ARGUMENT for a malformed checkpoint, a malformed pattern or skip
// expression, a pattern matching no module, non-floating tensors under
// kReject, or a unit whose tensors do not share one dtype (FSDP's one-dtype
// rule), naming them.
//
// `skip` (a POSIX extended regular expression searched in each tensor name;
// empty: none) leaves matching tensors out (buffers such as position_ids).
// `cast_to` gives every parameter that dtype (the load then converts); without
// it a unit mixing dtypes is refused naming them and the load that would work.
absl::StatusOr<std::string> LayoutJsonFromCheckpoint(
    const std::string& path, const std::vector<std::string>& wrap_patterns,
    core::Strategy strategy, bool use_orig_params,
    NonFloatingTensors non_floating = NonFloatingTensors::kReject,
    const std::string& skip = "",
    std::optional<core::DType> cast_to = std::nullopt,
    const FileAdmission& admit = nullptr);

}  // namespace summon::server

#endif  // SUMMON_SERVER_CHECKPOINT_CHECKPOINT_H_
