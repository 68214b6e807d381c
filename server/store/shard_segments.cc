// How the shard store comes to hold its segments: creating a model's
// segments or attaching the ones a previous daemon left (each checked
// against the model's layout, placement and incarnation), and creating a
// rank's gradients later. Apart from shard_store.cc because this is the
// only code that creates or vets segments; everything after works on
// segments already mapped.
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {
namespace {

constexpr int64_t kHeaderAlignment = 4096;
constexpr int64_t kShardAlignment = 64;
// Leaves room for the alignment round-ups without overflowing int64.
constexpr int64_t kMaxSegmentBytes = std::numeric_limits<int64_t>::max() / 2;
static_assert(ShardStore::kMaxSessionIdBytes == shm::kSessionIdBytes,
              "a staged segment records any valid session id");

int64_t RoundUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string Hex(uint64_t value) {
  return absl::StrCat("0x", absl::Hex(value, absl::kZeroPad16));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::CreateOrAttach(
    const std::string& instance, const std::string& model_name,
    const core::ModelSpec& model, const std::vector<int>& local_ranks,
    AttachMode mode, const ShardMemoryProvider* device,
    std::shared_ptr<StagingPool> staging_pool) {
  if (absl::Status status = ValidateInstance(instance); !status.ok()) {
    return status;
  }
  if (absl::Status status = ValidateModelName(model_name); !status.ok()) {
    return status;
  }
  std::vector<int> ranks = local_ranks;
  std::sort(ranks.begin(), ranks.end());
  const int world_size = model.groups.topology.world_size();
  if (ranks.empty() || ranks.front() < 0 || ranks.back() >= world_size ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("local ranks [", absl::StrJoin(local_ranks, ", "),
                     "] must be distinct ranks in [0, ", world_size, ")"));
  }

  std::unique_ptr<ShardStore> store(new ShardStore(
      instance, model_name, ranks, device, std::move(staging_pool)));
  const int64_t num_units = static_cast<int64_t>(model.units.size());
  store->header_bytes_ =
      RoundUp(sizeof(shm::SegmentHeader) + num_units * sizeof(shm::UnitEntry),
              kHeaderAlignment);
  int64_t end = store->header_bytes_;
  for (const core::UnitSpec& unit : model.units) {
    const int64_t bytes = unit.layout.shard_bytes();
    if (bytes > kMaxSegmentBytes - end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", model_name,
          "' has more bytes per rank than fit a shared-memory segment"));
    }
    store->unit_offsets_.push_back(end);
    store->unit_bytes_.push_back(bytes);
    end = RoundUp(end + bytes, kShardAlignment);
  }
  store->segment_bytes_ = RoundUp(end, kHeaderAlignment);

  absl::MutexLock lock(&store->mu_);
  std::vector<std::unique_ptr<shm::Segment>> found;
  std::vector<std::string> present;
  std::vector<std::string> missing;
  for (int rank : ranks) {
    RankSegments segments;
    segments.rank = rank;
    segments.local_index = static_cast<int>(store->ranks_.size());
    segments.fingerprint = LayoutFingerprint(model, rank);
    store->ranks_.push_back(std::move(segments));
    const std::string name =
        SegmentName(instance, model_name, rank, SegmentKind::kParams);
    absl::StatusOr<std::unique_ptr<shm::Segment>> segment =
        shm::Segment::Open(name);
    if (segment.ok()) {
      present.push_back(name);
      found.push_back(*std::move(segment));
    } else if (absl::IsNotFound(segment.status())) {
      missing.push_back(name);
    } else {
      return segment.status();
    }
  }

  absl::Status status;
  if (present.empty()) {
    if (mode == AttachMode::kAttach) {
      return absl::NotFoundError(
          absl::StrCat("model '", model_name,
                       "' has no shards in shared memory (no segment ",
                       missing.front(), ")"));
    }
    status = store->CreateAll();
  } else if (mode == AttachMode::kCreate) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", model_name,
                     "' already has shards in shared memory (segment ",
                     present.front(), ")"));
  } else if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model_name, "' has shared-memory params ",
        absl::StrJoin(present, ", "), " but not ", absl::StrJoin(missing, ", "),
        "; they are left untouched (remove the model's segments to start "
        "over)"));
  } else {
    status = store->AttachAll(std::move(found));
  }
  if (!status.ok()) return status;
  return store;
}

absl::Status ShardStore::CreateAll() {
  // Grads or staged data of an earlier model by this name would be attached
  // by a later restart as if they were this model's.
  for (const RankSegments& rank : ranks_) {
    for (SegmentKind kind : {SegmentKind::kGrads, SegmentKind::kStaged,
                             SegmentKind::kStagedGrads}) {
      const std::string name =
          SegmentName(instance_, model_name_, rank.rank, kind);
      absl::StatusOr<std::unique_ptr<shm::Segment>> leftover =
          shm::Segment::Open(name);
      if (leftover.ok()) {
        return absl::AlreadyExistsError(
            absl::StrCat("shared-memory segment ", name,
                         " is left over from an earlier model '", model_name_,
                         "'; remove the model's segments first"));
      }
      if (!absl::IsNotFound(leftover.status())) return leftover.status();
    }
  }
  std::random_device random;
  incarnation_ = (uint64_t{random()} << 32) ^ random();
  for (RankSegments& rank : ranks_) {
    absl::StatusOr<std::unique_ptr<shm::Segment>> segment =
        CreateSegment(rank.rank, SegmentKind::kParams, rank.fingerprint, "");
    absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
        segment.ok() ? BytesOf(rank, **segment) : segment.status();
    if (!bytes.ok()) {
      if (segment.ok()) shm::Unlink((*segment)->name()).IgnoreError();
      for (RankSegments& created : ranks_) {
        if (created.params == nullptr) break;
        const std::string name = created.params->name();
        created.params_bytes.reset();
        created.params.reset();
        shm::Unlink(name).IgnoreError();  // The create failure is the news.
      }
      return bytes.status();
    }
    rank.params = *std::move(segment);
    rank.params_bytes = *std::move(bytes);
  }
  return absl::OkStatus();
}

absl::Status ShardStore::AttachAll(
    std::vector<std::unique_ptr<shm::Segment>> params) {
  if (!params.front()->Unfinished()) {
    incarnation_ = params.front()->header()->incarnation;
  }
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankSegments& rank = ranks_[i];
    if (absl::Status status = VerifySegment(
            *params[i], rank.rank, SegmentKind::kParams, rank.fingerprint);
        !status.ok()) {
      return status;
    }
    absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
        BytesOf(rank, *params[i]);
    if (!bytes.ok()) return bytes.status();
    rank.params = std::move(params[i]);
    rank.params_bytes = *std::move(bytes);
  }
  for (size_t i = 0; i < ranks_.size(); ++i) {
    for (SegmentKind kind : {SegmentKind::kGrads, SegmentKind::kStaged,
                             SegmentKind::kStagedGrads}) {
      if (absl::Status status = AttachOptional(i, kind); !status.ok()) {
        return status;
      }
    }
  }
  ReconcileGenerations();
  attached_ = true;
  return absl::OkStatus();
}

absl::Status ShardStore::AttachOptional(size_t index, SegmentKind kind) {
  RankSegments& rank = ranks_[index];
  const std::string name = SegmentName(instance_, model_name_, rank.rank, kind);
  absl::StatusOr<std::unique_ptr<shm::Segment>> segment =
      shm::Segment::Open(name);
  if (absl::IsNotFound(segment.status())) return absl::OkStatus();
  if (!segment.ok()) return segment.status();
  // A spare staged segment (its session committed) holds nothing a restart
  // needs; neither does one whose creation never finished.
  if ((*segment)->Unfinished() ||
      (kind != SegmentKind::kGrads && IsSpare(**segment))) {
    segment->reset();
    return shm::Unlink(name);
  }
  if (absl::Status status =
          VerifySegment(**segment, rank.rank, kind, rank.fingerprint);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::unique_ptr<ShardMemory>> bytes = BytesOf(rank, **segment);
  if (!bytes.ok()) return bytes.status();
  const bool grads = kind == SegmentKind::kGrads;
  const bool staged = kind == SegmentKind::kStaged;
  (grads    ? rank.grads
   : staged ? rank.staged
            : rank.staged_grads) = *std::move(segment);
  (grads    ? rank.grads_bytes
   : staged ? rank.staged_bytes
            : rank.staged_grads_bytes) = *std::move(bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<shm::Segment>> ShardStore::CreateSegment(
    int rank, SegmentKind kind, uint64_t fingerprint,
    absl::string_view session_id) const {
  // Staged data is reserved unit by unit as it is staged (StagingShard).
  // Device placement keeps only the header in shared memory.
  const int64_t reserve_bytes = kind == SegmentKind::kStaged ||
                                        kind == SegmentKind::kStagedGrads ||
                                        on_device()
                                    ? header_bytes_
                                    : segment_bytes_;
  absl::StatusOr<std::unique_ptr<shm::Segment>> segment = shm::Segment::Create(
      SegmentName(instance_, model_name_, rank, kind),
      on_device() ? header_bytes_ : segment_bytes_, reserve_bytes);
  if (!segment.ok()) return segment.status();
  shm::SegmentHeader* header = (*segment)->header();
  header->format_version = shm::kFormatVersion;
  header->kind = static_cast<uint32_t>(kind);
  header->rank = rank;
  header->num_units = num_units();
  header->fingerprint = fingerprint;
  header->incarnation = incarnation_;
  header->header_bytes = header_bytes_;
  header->segment_bytes = segment_bytes_;
  header->placement = on_device() ? shm::kPlacementDevice : shm::kPlacementHost;
  header->session_id_bytes = static_cast<uint32_t>(session_id.size());
  std::memcpy(header->session_id, session_id.data(), session_id.size());
  shm::UnitEntry* units = (*segment)->units();
  for (int unit = 0; unit < num_units(); ++unit) {
    units[unit].offset = unit_offsets_[unit];
  }
  (*segment)->PublishHeader();
  return segment;
}

absl::Status ShardStore::VerifySegment(const shm::Segment& segment, int rank,
                                       SegmentKind kind,
                                       uint64_t fingerprint) const {
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory segment ", segment.name(), " ", why,
        "; it is left untouched (remove the model's segments to start over)"));
  };
  if (segment.Unfinished()) {
    return refuse("was never finished (a daemon died while creating it)");
  }
  const shm::SegmentHeader& header = *segment.header();
  if (!segment.HasMagic()) {
    return refuse("is not a summon shard segment (bad magic)");
  }
  if (header.format_version != shm::kFormatVersion) {
    return refuse(absl::StrCat("has format version ", header.format_version,
                               ", this summond reads ", shm::kFormatVersion));
  }
  if (header.kind != static_cast<uint32_t>(kind) || header.rank != rank) {
    return refuse(absl::StrCat("holds kind ", header.kind, " of rank ",
                               header.rank, ", expected ", KindSuffix(kind),
                               " of rank ", rank));
  }
  if (header.num_units != num_units() || header.fingerprint != fingerprint) {
    return refuse(absl::StrCat(
        "was written for another layout (", header.num_units,
        " units, fingerprint ", Hex(header.fingerprint), "; the model has ",
        num_units(), " units, fingerprint ", Hex(fingerprint),
        "): the model's layout or topology changed"));
  }
  if (header.placement == shm::kPlacementDevice) {
    return refuse(
        "held its shards in GPU memory of a daemon that has exited (device "
        "memory does not outlive its process)");
  }
  if (on_device()) {
    return refuse(
        "holds host-placed shards and this daemon places shards on the "
        "device (--device)");
  }
  if (header.header_bytes != header_bytes_ ||
      header.segment_bytes != segment_bytes_ ||
      segment.size() < segment_bytes_) {
    return refuse(absl::StrCat("has ", segment.size(), " bytes (header says ",
                               header.segment_bytes, "), expected ",
                               segment_bytes_));
  }
  for (int unit = 0; unit < num_units(); ++unit) {
    if (segment.units()[unit].offset != unit_offsets_[unit]) {
      return refuse(absl::StrCat("puts unit ", unit, " at ",
                                 segment.units()[unit].offset, ", expected ",
                                 unit_offsets_[unit]));
    }
  }
  if (header.incarnation != incarnation_) {
    return refuse(absl::StrCat(
        "belongs to another incarnation of model '", model_name_,
        "' than the lowest rank's params (incarnation ",
        Hex(header.incarnation), ", expected ", Hex(incarnation_), ")"));
  }
  if (header.session_id_bytes > kMaxSessionIdBytes) {
    return refuse("has a corrupt session id");
  }
  return absl::OkStatus();
}

absl::Status ShardStore::EnsureGrads(int rank) {
  absl::MutexLock lock(&mu_);
  RankSegments* segments = FindRank(rank);
  if (segments == nullptr) {
    return NotHosted(rank);
  }
  if (segments->grads != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<shm::Segment>> grads =
      CreateSegment(rank, SegmentKind::kGrads, segments->fingerprint, "");
  if (!grads.ok()) return grads.status();
  absl::StatusOr<std::unique_ptr<ShardMemory>> bytes =
      BytesOf(*segments, **grads);
  if (!bytes.ok()) {
    shm::Unlink((*grads)->name()).IgnoreError();  // The failure is the news.
    return bytes.status();
  }
  segments->grads = *std::move(grads);
  segments->grads_bytes = *std::move(bytes);
  return absl::OkStatus();
}

}  // namespace summon::server
