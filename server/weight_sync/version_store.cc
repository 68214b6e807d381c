#include "server/weight_sync/version_store.h"

#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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
                                 core::ModelSpec spec,
                                 std::shared_ptr<VersionCounters> counters)
    : model_(std::move(model)),
      version_(version),
      spec_(std::move(spec)),
      counters_(std::move(counters)) {}

VersionSnapshot::~VersionSnapshot() {
  counters_->bytes -= bytes_;
  for (auto& [rank, buffer] : ranks_) counters_->Recycle(std::move(buffer));
}

absl::Status VersionSnapshot::ReadPieces(
    const std::vector<VersionPiece>& pieces, core::DType dtype, bool scatter,
    uint8_t* out) const {
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(dtype));
  int64_t at = 0;
  for (const VersionPiece& piece : pieces) {
    auto rank = ranks_.find(piece.rank);
    if (rank == ranks_.end() || piece.unit < 0 ||
        piece.unit >= static_cast<int>(spec_.units.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("version ", version_, " of model '", model_,
                       "' has no unit #", piece.unit, " of rank ", piece.rank,
                       " on this node"));
    }
    const core::FlatParamLayout& layout = spec_.units[piece.unit].layout;
    if (piece.shard_element < 0 || piece.numel < 0 ||
        piece.shard_element > layout.chunk_numel() - piece.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "elements [", piece.shard_element, ", +", piece.numel,
          ") lie outside unit #", piece.unit, "'s shard (",
          layout.chunk_numel(), " elements)"));
    }
    const size_t in_size = core::ElementSize(layout.dtype());
    const uint8_t* from = rank->second.data() + unit_offsets_[piece.unit] +
                          piece.shard_element * in_size;
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
      counters_(std::make_shared<VersionCounters>()) {}

std::string VersionStore::KeptText(const ModelVersions& versions) {
  if (versions.kept.empty()) return "none kept";
  std::vector<int64_t> kept;
  for (const auto& [version, snapshot] : versions.kept) kept.push_back(version);
  return absl::StrCat("kept: ", absl::StrJoin(kept, ", "));
}

absl::StatusOr<int64_t> VersionStore::Take(const std::string& model,
                                           int64_t version) {
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
  auto snapshot = std::make_shared<VersionSnapshot>(model, version, entry.spec,
                                                    counters_);
  int64_t rank_bytes = 0;
  for (const core::UnitSpec& unit : entry.spec.units) {
    snapshot->unit_offsets_.push_back(rank_bytes);
    rank_bytes += unit.layout.shard_bytes();
  }
  {
    absl::ReaderMutexLock shards(&entry.shards_mu);
    for (int rank : entry.local_ranks) {
      absl::StatusOr<memory::FreshMemory> copy = counters_->Buffer(rank_bytes);
      if (!copy.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "no memory for version ", version, " of model '", model,
            "' (rank ", rank, ", ", rank_bytes, " bytes): ",
            copy.status().message()));
      }
      for (size_t unit = 0; unit < entry.spec.units.size(); ++unit) {
        if (absl::Status read = entry.store->ReadShard(
                rank, static_cast<int>(unit), /*grads=*/false, 0,
                copy->data() + snapshot->unit_offsets_[unit],
                entry.spec.units[unit].layout.shard_bytes());
            !read.ok()) {
          return read;
        }
      }
      snapshot->ranks_.emplace(rank, *std::move(copy));
      snapshot->bytes_ += rank_bytes;
      counters_->bytes += rank_bytes;
    }
  }
  counters_->DropSpares();
  counters_->unit_copies += static_cast<int64_t>(entry.spec.units.size());
  ++counters_->versions;
  const int64_t bytes = snapshot->bytes_;
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
  versions.kept.emplace(version, std::move(snapshot));
  while (static_cast<int>(versions.kept.size()) > max_versions_) {
    // Readers holding it keep its memory until they finish.
    versions.released.insert(versions.kept.begin()->first);
    versions.kept.erase(versions.kept.begin());
  }
  cond_.SignalAll();
  return bytes;
}

absl::StatusOr<std::shared_ptr<const VersionSnapshot>> VersionStore::Acquire(
    const std::string& model, int64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "version ", version, " of model '", model,
        "' was never published (no version of it is)"));
  }
  const ModelVersions& versions = it->second;
  if (versions.entry.expired()) {
    return absl::NotFoundError(absl::StrCat(
        "model '", model, "' was deleted with its versions (asked for ", version,
        ")"));
  }
  if (auto kept = versions.kept.find(version); kept != versions.kept.end()) {
    return kept->second;
  }
  if (versions.released.count(version) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version ", version, " of model '", model,
        "' was released (at most ", max_versions_, " are kept; ",
        KeptText(versions), ")"));
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
