#ifndef SUMMON_SERVER_MODEL_MODEL_ENTRY_H_
#define SUMMON_SERVER_MODEL_MODEL_ENTRY_H_

// One model as this node hosts it (ModelEntry), how its shards get their
// first values (ModelInit) and its health for clients (HealthOf). Apart from
// the registry because almost every room uses an entry while only a few
// create, load or delete models: code that only uses an entry can include
// this header and depend on //server/model:model_entry alone.
// model_registry.h includes it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/model_spec.h"
#include "core/session_rules.h"
#include "server/store/shard_store.h"

namespace summon::server {

// How a new model's shards get their first values. Seeded gradients use the
// seeded init of "<fqn>.grad", so they differ from the parameters even with
// the same seed.
struct ModelInit {
  // kExternal: zeros until the attached trainer writes its own values and
  // calls Trainer.MarkInitialized; the model is AWAITING_INIT until then.
  enum class Kind { kZeros, kSeeded, kExternal };
  Kind kind = Kind::kZeros;
  uint64_t seed = 0;
};

// One model hosted by this node: its spec, its local shards and the runtime
// state the rules look at.
struct ModelEntry {
  std::string name;
  std::string layout_json;  // As created; persisted for re-attach.
  core::ModelSpec spec;
  std::vector<int> local_ranks;  // Global ranks whose shards live here.
  // Which global ranks (on any node) hold gradient shards.
  std::vector<bool> grads_by_rank;
  // Null while the model is MISSING_SHARDS: a restarted daemon found a
  // segment gone; `missing_detail` says which. Only ModelRegistry::Find
  // hands such an entry out (to list, describe, load and delete it).
  std::unique_ptr<ShardStore> store;
  std::string missing_detail;

  // Guards the fields below. Lock order: the session manager's mutex (or
  // the trainer leases' mutex), then this, then `shards_mu`.
  absl::Mutex runtime_mu;
  core::ModelRuntimeState runtime ABSL_GUARDED_BY(runtime_mu);
  std::vector<std::optional<int64_t>> steps ABSL_GUARDED_BY(runtime_mu);
  int open_sessions ABSL_GUARDED_BY(runtime_mu) = 0;
  // Init external: sessions are refused until the trainer marks it done.
  bool awaiting_init ABSL_GUARDED_BY(runtime_mu) = false;
  // One optimizer step moves the generations once (CountOptimizerStep): the
  // last step counted, and per rank how often it entered OPTIMIZER (the
  // step key of trainers that report no step numbers).
  std::optional<int64_t> last_optimizer_step ABSL_GUARDED_BY(runtime_mu);
  std::vector<int64_t> optimizer_entries ABSL_GUARDED_BY(runtime_mu);
  // Per rank, the version its end-of-step report asked to publish
  // (ReportPhase's publish_step) in the step not yet ended on every rank;
  // cleared when it ends. Not persisted: a step whose end a restart cut
  // is not published.
  std::vector<std::optional<int64_t>> publish_asked ABSL_GUARDED_BY(runtime_mu);

  // Readers copy shards out (gathers, checksums, saves); writers change them
  // (writeback commits, checkpoint loads, init).
  absl::Mutex shards_mu;
  // Held by one writeback (PREPARE through COMMIT) at a time: a rank stages
  // one session's data at a time.
  absl::Mutex writeback_mu;

  // Base address of a local rank's shard of a unit (params or grads; grads
  // may be null when the rank has none).
  uint8_t* ParamShard(int rank, int unit) const {
    return store->ParamShard(rank, unit);
  }
};

// Sets the entry's runtime state for a fresh start: every one of
// `world_size` ranks IDLE with no step, every unit at the store's generation
// (0 without a store). Takes `runtime_mu`.
void InitRuntime(ModelEntry& model, int world_size);

// The model's state for clients (ModelState in the proto), with why it is
// not READY. Takes `runtime_mu`.
enum class ModelHealth { kReady, kAwaitingInit, kDegraded, kMissingShards };
ModelHealth HealthOf(ModelEntry& model, std::string* detail);

}  // namespace summon::server

#endif  // SUMMON_SERVER_MODEL_MODEL_ENTRY_H_
