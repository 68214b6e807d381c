#include "server/weight_sync/version_store.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace summon::server {

absl::StatusOr<memory::FreshMemory> VersionCounters::Buffer(int64_t bytes) {
  {
    absl::MutexLock lock(&spares_mu);
    for (auto it = spares.begin(); it != spares.end(); ++it) {
      if (it->size() == bytes) {
        memory::FreshMemory buffer = std::move(*it);
        spares.erase(it);
        spare_bytes -= bytes;
        return buffer;
      }
    }
  }
  return memory::FreshMemory::Map(bytes);
}

void VersionCounters::Recycle(memory::FreshMemory buffer) {
  absl::MutexLock lock(&spares_mu);
  spare_bytes += buffer.size();
  spares.push_back(std::move(buffer));
}

void VersionCounters::DropSpares() {
  std::vector<memory::FreshMemory> dropped;
  absl::MutexLock lock(&spares_mu);
  dropped.swap(spares);
  spare_bytes = 0;
}

VersionSnapshot::VersionSnapshot(std::string model, int64_t version,
                                 std::shared_ptr<ModelEntry> entry,
                                 std::shared_ptr<VersionCounters> counters)
    : model_(std::move(model)),
      version_(version),
      spec_(entry->spec),
      entry_(entry),
      counters_(std::move(counters)),
      ranks_(entry->local_ranks),
      generations_([&] {
        std::vector<uint64_t> generations;
        for (size_t unit = 0; unit < entry->spec.units.size(); ++unit) {
          generations.push_back(
              entry->store->Generation(static_cast<int>(unit)));
        }
        return generations;
      }()),
      unit_counted_(entry->spec.units.size(), false) {
  for (const core::UnitSpec& unit : spec_.units) {
    shard_bytes_ +=
        unit.layout.shard_bytes() * static_cast<int64_t>(ranks_.size());
  }
}

VersionSnapshot::~VersionSnapshot() {
  absl::MutexLock lock(&mu_);
  counters_->bytes -= bytes_;
  for (auto& [where, buffer] : copies_) counters_->Recycle(std::move(buffer));
}

int64_t VersionSnapshot::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status VersionSnapshot::Preserve(
    const ModelRegistry::ShardsWrite& write) {
  std::shared_ptr<ModelEntry> entry = entry_.lock();
  absl::MutexLock lock(&mu_);
  if (!cut_off_.empty()) return absl::OkStatus();
  if (write.deleting || entry == nullptr || entry->store == nullptr) {
    cut_off_ = absl::StrCat("model '", model_, "' was deleted");
    return absl::OkStatus();
  }
  std::vector<int> units = write.units;
  if (units.empty()) {
    for (size_t unit = 0; unit < spec_.units.size(); ++unit) {
      units.push_back(static_cast<int>(unit));
    }
  }
  for (int rank : ranks_) {
    if (write.rank >= 0 && rank != write.rank) continue;
    for (int unit : units) {
      if (unit < 0 || unit >= static_cast<int>(spec_.units.size()) ||
          copies_.count({rank, unit}) > 0) {
        continue;
      }
      if (absl::Status copied = CopyUnitLocked(*entry, rank, unit);
          !copied.ok()) {
        cut_off_ = absl::StrCat(
            "unit #", unit, " of rank ", rank,
            " could not be kept before a write: ", copied.message());
        return copied;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status VersionSnapshot::CopyUnitLocked(ModelEntry& entry, int rank,
                                             int unit) {
  const int64_t bytes = spec_.units[unit].layout.shard_bytes();
  absl::StatusOr<memory::FreshMemory> copy = counters_->Buffer(bytes);
  absl::Status read = copy.ok() ? entry.store->ReadShard(rank, unit,
                                                         /*grads=*/false, 0,
                                                         copy->data(), bytes)
                                : copy.status();
  if (!read.ok()) return read;
  copies_.emplace(std::make_pair(rank, unit), *std::move(copy));
  bytes_ += bytes;
  counters_->bytes += bytes;
  if (!unit_counted_[unit]) {
    unit_counted_[unit] = true;
    ++counters_->unit_copies;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> VersionSnapshot::CopyAhead(ModelEntry& entry, int rank,
                                                int unit) {
  absl::MutexLock lock(&mu_);
  if (!cut_off_.empty() || entry.store == nullptr ||
      copies_.count({rank, unit}) > 0) {
    return false;
  }
  // A moved generation: a writer announced itself (Preserve copied it
  // first, so it is in copies_) or did not (its reads are refused); the
  // shard no longer holds this version's bytes either way.
  if (entry.store->Generation(unit) != generations_[unit]) return false;
  // A failure here (no memory) cuts nothing off: the copy before the write
  // tries again, and only its failure does.
  if (absl::Status copied = CopyUnitLocked(entry, rank, unit); !copied.ok()) {
    return copied;
  }
  return true;
}

absl::Status VersionSnapshot::ReadPieces(
    const std::vector<VersionPiece>& pieces, core::DType dtype, bool scatter,
    uint8_t* out) const {
  // A live unit is read from the shards under the shards lock (shared) and
  // this version's lock (shared): a writer's copy before its write waits
  // for the read, and the writer for the copy.
  std::shared_ptr<ModelEntry> entry = entry_.lock();
  if (entry == nullptr) {
    absl::ReaderMutexLock lock(&mu_);
    return ReadPiecesLocked(pieces, dtype, scatter, out);
  }
  absl::ReaderMutexLock shards(&entry->shards_mu);
  absl::ReaderMutexLock lock(&mu_);
  return ReadPiecesLocked(pieces, dtype, scatter, out);
}

absl::Status VersionSnapshot::CheckHeld(const VersionPiece& piece) const {
  if (std::find(ranks_.begin(), ranks_.end(), piece.rank) == ranks_.end() ||
      piece.unit < 0 || piece.unit >= static_cast<int>(spec_.units.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "version ", version_, " of model '", model_, "' has no unit #",
        piece.unit, " of rank ", piece.rank, " on this node"));
  }
  const core::FlatParamLayout& layout = spec_.units[piece.unit].layout;
  if (piece.shard_element < 0 || piece.numel < 0 ||
      piece.shard_element > layout.chunk_numel() - piece.numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("elements [", piece.shard_element, ", +", piece.numel,
                     ") lie outside unit #", piece.unit, "'s shard (",
                     layout.chunk_numel(), " elements)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<absl::string_view>> VersionSnapshot::CopiedBytes(
    const VersionPiece& piece, core::DType dtype) const {
  if (absl::Status held = CheckHeld(piece); !held.ok()) return held;
  const core::FlatParamLayout& layout = spec_.units[piece.unit].layout;
  if (layout.dtype() != dtype) return std::nullopt;
  absl::ReaderMutexLock lock(&mu_);
  auto copy = copies_.find({piece.rank, piece.unit});
  if (copy == copies_.end()) return std::nullopt;
  const size_t size = core::ElementSize(dtype);
  return absl::string_view(reinterpret_cast<const char*>(copy->second.data()) +
                               piece.shard_element * size,
                           piece.numel * size);
}

absl::Status VersionSnapshot::ReadPiecesLocked(
    const std::vector<VersionPiece>& pieces, core::DType dtype, bool scatter,
    uint8_t* out) const {
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(dtype));
  std::shared_ptr<ModelEntry> entry = entry_.lock();
  std::vector<uint8_t> live;  // One live piece's bytes.
  // Pieces of one rank's unit come in runs (a strided box: one a row, tens
  // of thousands a read); its lookups (two store locks among them) are done
  // once a run: bench/RESULTS.md, "Weight sync's local pull".
  int run_rank = -1;
  int run_unit = -1;
  const uint8_t* run_base = nullptr;  // The unit's host bytes.
  int64_t at = 0;
  for (const VersionPiece& piece : pieces) {
    if (absl::Status held = CheckHeld(piece); !held.ok()) return held;
    const core::FlatParamLayout& layout = spec_.units[piece.unit].layout;
    const size_t in_size = core::ElementSize(layout.dtype());
    const uint8_t* from = nullptr;
    if (piece.rank == run_rank && piece.unit == run_unit) {
      from = run_base + piece.shard_element * in_size;
    } else if (auto copy = copies_.find({piece.rank, piece.unit});
               copy != copies_.end()) {
      run_rank = piece.rank;
      run_unit = piece.unit;
      run_base = copy->second.data();
      from = run_base + piece.shard_element * in_size;
    } else {
      if (!cut_off_.empty() || entry == nullptr || entry->store == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "version ", version_, " of model '", model_, "' cannot be read: ",
            cut_off_.empty() ? "the model was deleted" : cut_off_));
      }
      if (entry->store->Generation(piece.unit) != generations_[piece.unit]) {
        return absl::AbortedError(
            absl::StrCat("unit #", piece.unit, " of model '", model_,
                         "' changed after version ", version_,
                         " without its copy; refusing a mix"));
      }
      // Host shards in place; device ones through a bounce buffer.
      if (const uint8_t* shard =
              entry->store->ParamShard(piece.rank, piece.unit);
          shard != nullptr) {
        run_rank = piece.rank;
        run_unit = piece.unit;
        run_base = shard;
        from = shard + piece.shard_element * in_size;
      } else {
        run_rank = -1;  // Read each piece through the bounce buffer.
        live.resize(piece.numel * in_size);
        if (absl::Status read = entry->store->ReadShard(
                piece.rank, piece.unit, /*grads=*/false,
                piece.shard_element * static_cast<int64_t>(in_size),
                live.data(), static_cast<int64_t>(live.size()));
            !read.ok()) {
          return read;
        }
        from = live.data();
      }
    }
    uint8_t* to = out + (scatter ? piece.dest_element : at) * out_size;
    if (layout.dtype() == dtype) {
      std::memcpy(to, from, piece.numel * in_size);
    } else if (absl::Status converted = core::ConvertElements(
                   layout.dtype(), from, dtype, to, piece.numel);
               !converted.ok()) {
      return converted;
    }
    at += piece.numel;
  }
  return absl::OkStatus();
}

VersionStore::VersionStore(ModelRegistry* registry, int max_versions)
    : registry_(registry),
      max_versions_(max_versions < 1 ? 1 : max_versions),
      counters_(std::make_shared<VersionCounters>()) {
  registry_->SetBeforeShardsWrite(
      [this](ModelEntry& model, const ModelRegistry::ShardsWrite& write) {
        BeforeShardsWrite(model, write);
      });
}

VersionStore::~VersionStore() {
  {
    absl::MutexLock lock(&copy_mu_);
    stopping_ = true;
    copy_cond_.SignalAll();
  }
  if (copier_.joinable()) copier_.join();
  registry_->SetBeforeShardsWrite(nullptr);
}

void VersionStore::CopyLoop() {
  while (true) {
    std::shared_ptr<VersionSnapshot> version;
    {
      absl::MutexLock lock(&copy_mu_);
      copying_ = false;
      copy_cond_.SignalAll();
      while (!stopping_ && to_copy_.empty()) copy_cond_.Wait(&copy_mu_);
      if (stopping_) return;
      version = to_copy_.front().lock();
      to_copy_.pop_front();
      copying_ = true;
    }
    if (version != nullptr) CopyVersionAhead(version);
  }
}

void VersionStore::CopyVersionAhead(
    const std::shared_ptr<VersionSnapshot>& version) {
  std::shared_ptr<ModelEntry> entry = version->entry_.lock();
  if (entry == nullptr) return;
  for (int rank : version->ranks_) {
    for (size_t unit = 0; unit < version->spec_.units.size(); ++unit) {
      {
        absl::MutexLock lock(&copy_mu_);
        if (stopping_) return;
      }
      // One unit per hold of the shards lock (shared, like a reader's and
      // a writer's announcement): a writer's copy before its write waits
      // for one unit's copy at most, then copies what is still live.
      absl::ReaderMutexLock shards(&entry->shards_mu);
      absl::StatusOr<bool> copied =
          version->CopyAhead(*entry, rank, static_cast<int>(unit));
      if (!copied.ok()) {
        spdlog::warn(
            "version {} of model {}: background copy stopped ({}); its units "
            "are copied before the next write instead",
            version->version(), version->model(), copied.status().ToString());
        return;
      }
      if (*copied) ++counters_->copied_ahead;
    }
  }
}

void VersionStore::WaitCopiedAhead() {
  absl::MutexLock lock(&copy_mu_);
  while (!stopping_ && (copying_ || !to_copy_.empty())) {
    copy_cond_.Wait(&copy_mu_);
  }
}

void VersionStore::BeforeShardsWrite(ModelEntry& model,
                                     const ModelRegistry::ShardsWrite& write) {
  std::vector<std::shared_ptr<VersionSnapshot>> alive;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model.name);
    if (it == models_.end()) return;
    std::vector<std::weak_ptr<VersionSnapshot>>& versions = it->second.alive;
    for (auto version = versions.begin(); version != versions.end();) {
      std::shared_ptr<VersionSnapshot> held = version->lock();
      if (held == nullptr) {
        version = versions.erase(version);
        continue;
      }
      // Another incarnation's (a model deleted and created again) never
      // refers to these shards.
      if (held->entry_.lock().get() == &model) alive.push_back(std::move(held));
      ++version;
    }
  }
  for (const std::shared_ptr<VersionSnapshot>& version : alive) {
    if (absl::Status kept = version->Preserve(write); !kept.ok()) {
      spdlog::error("version {} of model {} cut off before a write: {}",
                    version->version(), model.name, kept.ToString());
    }
  }
}

std::string VersionStore::KeptText(const ModelVersions& versions) {
  if (versions.kept.empty()) return "none kept";
  std::vector<int64_t> kept;
  for (const auto& [version, snapshot] : versions.kept) kept.push_back(version);
  return absl::StrCat("kept: ", absl::StrJoin(kept, ", "));
}

absl::StatusOr<int64_t> VersionStore::Take(const std::string& model,
                                           int64_t version, bool copy_ahead) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found = registry_->Get(model);
  if (!found.ok()) return found.status();
  ModelEntry& entry = **found;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model);
    if (it != models_.end() && it->second.entry.lock() == *found &&
        version <= it->second.newest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "version ", version, " of model '", model,
          "' is not above the newest published, ", it->second.newest));
    }
  }
  if (entry.store == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model, "' has missing shards; nothing to publish"));
  }
  // Recorded (generations) and listed for BeforeShardsWrite in one hold of
  // the shards lock, which every writer's announcement holds too: a writer
  // either finished before (the generations are its) or finds the version.
  absl::MutexLock shards(&entry.shards_mu);
  auto snapshot =
      std::make_shared<VersionSnapshot>(model, version, *found, counters_);
  const int64_t bytes = snapshot->shard_bytes();
  absl::MutexLock lock(&mu_);
  // Versions of deleted models go with the next publish of any model.
  for (auto it = models_.begin(); it != models_.end();) {
    it = it->second.entry.expired() ? models_.erase(it) : std::next(it);
  }
  ModelVersions& versions = models_[model];
  if (versions.entry.lock() != *found) versions = ModelVersions{};
  versions.entry = *found;
  if (version <= versions.newest) {
    return absl::FailedPreconditionError(
        absl::StrCat("version ", version, " of model '", model,
                     "' was published meanwhile up to ", versions.newest));
  }
  versions.newest = version;
  versions.rolled_back.erase(version);
  ++counters_->versions;
  // Spares the copies since the last publish did not take go now, before
  // this publish's releases add theirs (the next step's copies take them).
  counters_->DropSpares();
  versions.alive.push_back(snapshot);
  std::weak_ptr<VersionSnapshot> queued = snapshot;
  versions.kept.emplace(version, std::move(snapshot));
  while (static_cast<int>(versions.kept.size()) > max_versions_) {
    // Readers holding it keep its memory until they finish.
    versions.released.insert(versions.kept.begin()->first);
    versions.kept.erase(versions.kept.begin());
  }
  cond_.SignalAll();
  if (copy_ahead) {
    // After the release above, so that the copies of the released version
    // (spares, when no reader holds it) are the ones this version fills.
    absl::MutexLock copy_lock(&copy_mu_);
    to_copy_.push_back(std::move(queued));
    if (!copier_.joinable()) copier_ = std::thread([this] { CopyLoop(); });
    copy_cond_.SignalAll();
  }
  return bytes;
}

absl::StatusOr<std::shared_ptr<const VersionSnapshot>> VersionStore::Acquire(
    const std::string& model, int64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  if (it == models_.end()) {
    return absl::NotFoundError(
        absl::StrCat("version ", version, " of model '", model,
                     "' was never published (no version of it is)"));
  }
  const ModelVersions& versions = it->second;
  if (versions.entry.expired()) {
    return absl::NotFoundError(absl::StrCat(
        "model '", model, "' was deleted with its versions (asked for ",
        version, ")"));
  }
  if (auto kept = versions.kept.find(version); kept != versions.kept.end()) {
    return kept->second;
  }
  if (auto undone = versions.rolled_back.find(version);
      undone != versions.rolled_back.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version ", version, " of model '", model,
        "' was rolled back: ", undone->second, " (", KeptText(versions), ")"));
  }
  if (versions.released.count(version) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version ", version, " of model '", model, "' was released (at most ",
        max_versions_, " are kept; ", KeptText(versions), ")"));
  }
  return absl::NotFoundError(absl::StrCat("version ", version, " of model '",
                                          model, "' was never published (",
                                          KeptText(versions), ")"));
}

absl::StatusOr<int64_t> VersionStore::Wait(const std::string& model,
                                           int64_t min_version,
                                           absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  bool timed_out = false;
  while (true) {
    auto it = models_.find(model);
    if (it != models_.end() && !it->second.kept.empty() &&
        it->second.kept.rbegin()->first >= min_version) {
      return it->second.kept.rbegin()->first;
    }
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no version >= ", min_version, " of model '", model,
          "' was published before the deadline (",
          it == models_.end() ? "none kept" : KeptText(it->second), ")"));
    }
    timed_out = cond_.WaitWithDeadline(&mu_, deadline);
  }
}

void VersionStore::RollBack(const std::string& model, int64_t version,
                            const std::string& why) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return;
  ModelVersions& versions = it->second;
  if (versions.kept.erase(version) == 0) return;
  versions.rolled_back[version] = why;
  // The newest published before it: Take only ever adds above the newest.
  int64_t newest = -1;
  if (!versions.kept.empty()) newest = versions.kept.rbegin()->first;
  if (!versions.released.empty()) {
    newest = std::max(newest, *versions.released.rbegin());
  }
  versions.newest = newest;
}

std::vector<int64_t> VersionStore::Kept(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> kept;
  auto it = models_.find(model);
  if (it == models_.end()) return kept;
  for (const auto& [version, snapshot] : it->second.kept) {
    kept.push_back(version);
  }
  return kept;
}

}  // namespace summon::server
