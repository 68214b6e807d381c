#ifndef SUMMON_SERVER_MODEL_MODEL_REGISTRY_H_
#define SUMMON_SERVER_MODEL_MODEL_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/model_spec.h"
#include "server/checkpoint/checkpoint.h"
#include "server/model/model_entry.h"
#include "server/store/shard_store.h"

namespace summon::server {

struct ShardChecksums {
  int rank = 0;
  int unit = 0;
  uint64_t params = 0;
  std::optional<uint64_t> grads;
  uint64_t generation = 0;
};

// The models of one node. Models persist as small JSON files in the data
// directory and their shards in shared memory, so a restarted daemon
// re-attaches every model with nothing lost.
class ModelRegistry {
 public:
  struct Options {
    std::string data_dir;  // Empty: nothing persists across restarts.
    std::string instance;  // Shared-memory name prefix (see ShardStore).
    core::Topology topology;
    int node = 0;
    // Device placement of every model's shards (summond --device); null:
    // host shared memory. Not owned; outlives the registry.
    const ShardMemoryProvider* device = nullptr;
    // Vets every file a checkpoint load opens (the daemon's: beneath a
    // checkpoint root, CheckpointRoots::Admission); null: any file.
    FileAdmission checkpoint_admission = nullptr;
    // Spare staging of every model's store (the node's); null: each store
    // keeps its own with StagingPool's defaults.
    std::shared_ptr<StagingPool> staging_pool = nullptr;
  };

  explicit ModelRegistry(Options options);
  // Without a data directory nothing could re-attach the shards later, so
  // they are unlinked with the registry; with one they stay for a restart.
  ~ModelRegistry();

  // Re-attaches the models recorded in the data directory. Models whose
  // shards are gone (e.g. after a reboot) are reported, not silently
  // recreated.
  absl::Status Recover();

  absl::StatusOr<std::shared_ptr<ModelEntry>> Create(
      const std::string& name, const std::string& layout_json,
      std::optional<core::Strategy> strategy, const ModelInit& init,
      const std::vector<int>& grad_ranks, const ModelInit& grad_init);

  // Creates a model whose layout comes from a checkpoint's tensors (units
  // per `wrap_patterns`) and loads it.
  absl::StatusOr<std::shared_ptr<ModelEntry>> CreateFromCheckpoint(
      const std::string& name, const std::string& path,
      const std::vector<std::string>& wrap_patterns, core::Strategy strategy,
      bool use_orig_params, int64_t* bytes_read);

  // NOT_FOUND (R11) naming the model; FAILED_PRECONDITION for a model whose
  // shards are missing, saying how to recover it.
  absl::StatusOr<std::shared_ptr<ModelEntry>> Get(
      const std::string& name) const;
  // Like Get, but also a MISSING_SHARDS model (store null).
  absl::StatusOr<std::shared_ptr<ModelEntry>> Find(
      const std::string& name) const;
  // Get, after giving a MISSING_SHARDS model fresh zero-filled shards (the
  // start of a load that refills it).
  absl::StatusOr<std::shared_ptr<ModelEntry>> GetRecreatingShards(
      const std::string& name);
  // Ends init external on this node (Trainer.MarkInitialized reaching it
  // through NodeRuntime::SetGenerations, with the generations the leader
  // chose): the model becomes openable, recorded in the data dir. A repeat
  // is harmless (the leader decides whether a call may end the init).
  absl::Status EndInit(ModelEntry& model);
  std::vector<std::shared_ptr<ModelEntry>> List() const;

  // Loads safetensors into an existing model's shards (each local rank reads
  // only its ranges); bumps every unit's generation and external-write
  // counter (R18). Refused while sessions are open on the model; callers
  // take SessionManager::LockForShardWrite first (R15).
  absl::StatusOr<int64_t> LoadCheckpoint(ModelEntry& model,
                                         const std::string& path,
                                         bool convert = false);
  absl::StatusOr<std::vector<std::string>> SaveCheckpoint(
      ModelEntry& model, const std::string& path, int64_t max_file_bytes);

  // The checkpoint files a save of `model` to `path` writes; the same on
  // every node of a cluster.
  absl::StatusOr<CheckpointFiles> PlanSave(const ModelEntry& model,
                                           const std::string& path,
                                           int64_t max_file_bytes) const;
  // This node's ranks' ranges of a planned save, into files the leader
  // created. Returns the bytes written.
  absl::StatusOr<int64_t> WriteSaveRanges(ModelEntry& model,
                                          const CheckpointFiles& plan);

  // FAILED_PRECONDITION/UNAVAILABLE when device shards cannot be read.
  absl::StatusOr<std::vector<ShardChecksums>> Checksums(ModelEntry& model);

  // Forgets a model and unlinks its shared memory. Refused while sessions
  // are open on it.
  absl::Status Remove(const std::string& name);

  // The registry's record of each model as the cluster's coordinator keeps
  // it (docs/architecture.md, "The coordinator"): the text of the data
  // dir's record, or for a deleted model a tombstone, so that a node which
  // was away when the model went also lets it go (an absent record says
  // nothing: the coordinator may be new). Called with the record of every
  // change (create, init external ended, delete) before the data dir or the
  // registry changes; an error refuses the change. Set before serving.
  using RecordHook = std::function<absl::Status(const std::string& name,
                                                const std::string& record)>;
  void SetRecordHook(RecordHook hook) { record_hook_ = std::move(hook); }

  // Makes this node's models what the coordinator's records say (`records`:
  // model name -> record, as RecordHook got it): a model recorded there but
  // not here (a lost data dir, a create while this node was away) is
  // re-attached to its shards (or MISSING_SHARDS when they are gone too),
  // one recorded differently is rewritten, one whose record is a tombstone
  // is removed. Models the coordinator has no record of are kept. Nothing
  // is published. Each model that cannot be reconciled is logged and left.
  // Then every unit's generation is at least its shards' (a follower about
  // to lead had only heard the generations the previous leader sent).
  void Reconcile(const std::map<std::string, std::string>& records);

  const Options& options() const { return options_; }

  // What a writer of a model's shards on this node is about to change:
  // `rank` (-1: every local rank), `units` (empty: every unit); `deleting`:
  // the shards go away instead.
  struct ShardsWrite {
    int rank = -1;
    std::vector<int> units;
    bool deleting = false;
  };
  using BeforeShardsWriteHook =
      std::function<void(ModelEntry& model, const ShardsWrite& write)>;
  // Weight sync's published versions refer to the live shards until they
  // change (copy on write, server/weight_sync/version_store.h): every
  // writer calls BeforeShardsWrite with `shards_mu` held (shared or
  // exclusive) and before the first byte changes; the trainer's writes are
  // announced by its phase move into OPTIMIZER (TrainerServiceImpl) before
  // it hears back. Set before serving, cleared (null) by its owner.
  void SetBeforeShardsWrite(BeforeShardsWriteHook hook) {
    before_shards_write_ = std::move(hook);
  }
  void BeforeShardsWrite(ModelEntry& model, const ShardsWrite& write) const {
    if (before_shards_write_) before_shards_write_(model, write);
  }

 private:
  // The entry's spec and ranks, without shards or runtime state.
  absl::StatusOr<std::shared_ptr<ModelEntry>> NewEntry(
      const std::string& name, const std::string& layout_json,
      std::optional<core::Strategy> strategy) const;
  absl::StatusOr<std::shared_ptr<ModelEntry>> Build(
      const std::string& name, const std::string& layout_json,
      std::optional<core::Strategy> strategy, AttachMode mode);
  // The entry of a recorded model whose shards could not be re-attached.
  absl::StatusOr<std::shared_ptr<ModelEntry>> BuildMissing(
      const std::string& name, const std::string& layout_json,
      core::Strategy strategy, const absl::Status& why);
  // Publishes the record (RecordHook) unless `publish` is false (it came
  // from the coordinator), then writes it into the data dir.
  absl::Status Persist(ModelEntry& model, bool publish = true) const;
  // An entry for the record `text`, attached to the model's shards, else
  // MISSING_SHARDS when they are gone; `source` names it in logs.
  absl::StatusOr<std::shared_ptr<ModelEntry>> FromRecord(
      const std::string& text, const std::string& source);
  // The record of a deleted model.
  static std::string Tombstone(const std::string& name);
  // Forgets a model here only (Remove without the tombstone).
  absl::Status RemoveLocal(const std::string& name, bool publish);

  Options options_;
  BeforeShardsWriteHook before_shards_write_;
  RecordHook record_hook_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ModelEntry>> models_
      ABSL_GUARDED_BY(mu_);
};

// The node's shared-memory instance name for a data directory: stable across
// restarts, distinct between daemons with different data directories.
std::string InstanceForDataDir(const std::string& data_dir);

}  // namespace summon::server

#endif  // SUMMON_SERVER_MODEL_MODEL_REGISTRY_H_
