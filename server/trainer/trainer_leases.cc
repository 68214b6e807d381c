// Attached trainers' leases (R17): attach, renew, detach, the lease checks
// of phase reports, and the reaper that ends lapsed leases. The leases file
// of the data dir is read and written in leases_file.cc.
#include "server/trainer/trainer_leases.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

constexpr size_t kEndedLeasesKept = 1024;
// A reaper wake-up later than its interval by more than this means the
// daemon did not run (stopped, or starved): its trainers could not renew.
constexpr absl::Duration kStall = absl::Seconds(2);

std::string NewLeaseId() {
  static std::mt19937_64 generator{std::random_device{}()};
  static absl::Mutex generator_mu;
  absl::MutexLock lock(&generator_mu);
  return absl::StrFormat("l-%016x", generator());
}

std::string PhaseAndStep(core::TrainingPhase phase,
                         const std::optional<int64_t>& step) {
  std::string text(core::TrainingPhaseName(phase));
  if (step.has_value()) absl::StrAppend(&text, " at step ", *step);
  return text;
}

}  // namespace

TrainerLeases::TrainerLeases(ModelRegistry* registry, Options options)
    : registry_(registry), options_(std::move(options)) {
  if (options_.reap_interval > absl::ZeroDuration()) {
    reaper_ = std::thread([this] { ReaperLoop(); });
  }
}

TrainerLeases::~TrainerLeases() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  absl::MutexLock lock(&mu_);
  if (leases_fd_ >= 0) close(leases_fd_);
}

void TrainerLeases::ReaperLoop() {
  absl::MutexLock lock(&mu_);
  absl::Time last = absl::Now();
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.reap_interval);
    if (stopping_) break;
    // Wall time, not options_.clock: a stall is this process not running.
    const absl::Time now = absl::Now();
    const absl::Duration late = now - last - options_.reap_interval;
    last = now;
    if (late > kStall) OnStall(late);
    mu_.Unlock();
    ReapLapsed();
    mu_.Lock();
  }
}

const core::TrainerLease* TrainerLeases::HolderOf(const std::string& model,
                                                  int rank) const {
  for (const auto& [id, lease] : leases_) {
    if (lease.model == model &&
        std::binary_search(lease.ranks.begin(), lease.ranks.end(), rank)) {
      return &lease;
    }
  }
  return nullptr;
}

absl::StatusOr<TrainerLeases::Attached> TrainerLeases::Attach(
    const std::string& model_name, const std::vector<int>& ranks,
    const std::string& incarnation, std::optional<absl::Duration> lease_ttl) {
  absl::StatusOr<Attached> attached;
  {
    absl::MutexLock lock(&mu_);
    attached = AttachLocked(model_name, ranks, incarnation, lease_ttl);
  }
  // A takeover may have ended a lease mid-OPTIMIZER.
  MoveCutShortSteps();
  return attached;
}

absl::StatusOr<TrainerLeases::Attached> TrainerLeases::AttachLocked(
    const std::string& model_name, const std::vector<int>& ranks,
    const std::string& incarnation, std::optional<absl::Duration> lease_ttl) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(model_name);
  if (!model.ok()) return model.status();
  const absl::Duration ttl = lease_ttl.value_or(options_.default_lease);
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("a trainer lease lasts more than 0 and at most ",
                     absl::FormatDuration(options_.max_lease)));
  }
  const absl::Time now = options_.clock();
  std::vector<const core::TrainerLease*> holders;
  for (int rank : ranks) {
    const core::TrainerLease* holder = HolderOf(model_name, rank);
    if (holder != nullptr &&
        std::find(holders.begin(), holders.end(), holder) == holders.end()) {
      holders.push_back(holder);
    }
  }
  absl::StatusOr<core::AttachDecision> decision = core::DecideAttach(
      model_name, (*model)->spec.groups.topology.world_size(), ranks,
      incarnation, holders, now);
  if (!decision.ok()) return decision.status();
  Attached attached;
  attached.previous_incarnation = decision->previous_incarnation;
  for (int rank : ranks) {
    auto lapsed = lapsed_holder_.find({model_name, rank});
    if (attached.previous_incarnation.empty() &&
        lapsed != lapsed_holder_.end() && lapsed->second != incarnation) {
      attached.previous_incarnation = lapsed->second;
    }
  }
  for (const std::string& lapsed : decision->taken_over_leases) {
    EndLease(lapsed,
             absl::StrCat("lease of trainer '", leases_[lapsed].incarnation,
                          "' lapsed; taken over by '", incarnation, "'"),
             /*ranks_to_idle=*/true);
  }
  if (decision->resumed_lease.has_value()) {
    core::TrainerLease& lease = leases_[*decision->resumed_lease];
    lease.ttl = ttl;
    lease.expires = now + ttl;
    attached.lease = lease;
    attached.resumed = true;
  } else {
    core::TrainerLease lease;
    lease.id = NewLeaseId();
    lease.model = model_name;
    lease.incarnation = incarnation;
    lease.ranks = ranks;
    std::sort(lease.ranks.begin(), lease.ranks.end());
    lease.ttl = ttl;
    lease.expires = now + ttl;
    leases_[lease.id] = lease;
    attached.lease = lease;
  }
  for (int rank : attached.lease.ranks) {
    last_event_.erase({model_name, rank});
    lapsed_holder_.erase({model_name, rank});
  }
  spdlog::info(
      "trainer attach model={} ranks=[{}] incarnation={} lease={} "
      "resumed={} previous={}",
      model_name, absl::StrJoin(attached.lease.ranks, ","), incarnation,
      attached.lease.id, attached.resumed, attached.previous_incarnation);
  PersistLocked();
  return attached;
}

absl::Status TrainerLeases::EndedError(const std::string& lease_id) const {
  auto it = ended_.find(lease_id);
  if (it == ended_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease_id, " is not held by any trainer"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("lease ", lease_id, " has ended: ", it->second));
}

absl::StatusOr<core::TrainerLease> TrainerLeases::Heartbeat(
    const std::string& lease_id, bool phases_unknown,
    bool phases_reestablished) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return EndedError(lease_id);
  it->second.expires = options_.clock() + it->second.ttl;
  if (phases_unknown) {
    MarkUnknown(it->second, "its trainer could not reach summond");
  } else if (phases_reestablished && unknown_.erase(lease_id) > 0) {
    spdlog::info("trainer model={} incarnation={}: phases known again",
                 it->second.model, it->second.incarnation);
  }
  return it->second;
}

absl::Status TrainerLeases::Detach(const std::string& lease_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return EndedError(lease_id);
    EndLease(lease_id,
             absl::StrCat("trainer '", it->second.incarnation, "' detached"),
             /*ranks_to_idle=*/true);
    PersistLocked();
  }
  MoveCutShortSteps();
  return absl::OkStatus();
}

absl::Status TrainerLeases::CheckAndRenew(const std::string& model, int rank,
                                          const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  const core::TrainerLease* holder = HolderOf(model, rank);
  if (holder == nullptr && !lease_id.empty() && ended_.count(lease_id) > 0) {
    return EndedError(lease_id);
  }
  if (absl::Status status =
          core::CheckReportLease(model, rank, holder, lease_id);
      !status.ok()) {
    return status;
  }
  if (holder != nullptr) {
    leases_[holder->id].expires = options_.clock() + holder->ttl;
  }
  return absl::OkStatus();
}

absl::Status TrainerLeases::CheckModelLease(const std::string& model,
                                            const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it != leases_.end() && it->second.model == model) {
    it->second.expires = options_.clock() + it->second.ttl;
    return absl::OkStatus();
  }
  if (!lease_id.empty()) {
    return it == leases_.end()
               ? EndedError(lease_id)
               : absl::FailedPreconditionError(
                     absl::StrCat("lease ", lease_id, " holds ranks of model '",
                                  it->second.model, "', not of '", model, "'"));
  }
  for (const auto& [id, lease] : leases_) {
    if (lease.model == model) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model, "' has trainer '", lease.incarnation,
                       "' attached; call with its lease"));
    }
  }
  return absl::OkStatus();
}

std::pair<std::string, std::string> TrainerLeases::AttachmentOf(
    const std::string& model, int rank) const {
  absl::MutexLock lock(&mu_);
  const core::TrainerLease* holder = HolderOf(model, rank);
  auto event = last_event_.find({model, rank});
  return {holder != nullptr ? holder->incarnation : "",
          event != last_event_.end() ? event->second : ""};
}

std::vector<std::string> TrainerLeases::AttachedTrainers(
    const std::string& model) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> trainers;
  for (const auto& [id, lease] : leases_) {
    if (lease.model == model) trainers.push_back(lease.incarnation);
  }
  return trainers;
}

void TrainerLeases::Revoke(const std::string& model, const std::string& why) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.model == model) ids.push_back(id);
  }
  for (const std::string& id : ids) EndLease(id, why, /*ranks_to_idle=*/true);
  // The model is being deleted: no generation of it to move.
  cut_short_.erase(std::remove(cut_short_.begin(), cut_short_.end(), model),
                   cut_short_.end());
  PersistLocked();
}

void TrainerLeases::Forget(const std::string& model) {
  absl::MutexLock lock(&mu_);
  for (auto it = last_event_.begin(); it != last_event_.end();) {
    it = it->first.first == model ? last_event_.erase(it) : std::next(it);
  }
  for (auto it = lapsed_holder_.begin(); it != lapsed_holder_.end();) {
    it = it->first.first == model ? lapsed_holder_.erase(it) : std::next(it);
  }
  PersistLocked();
}

void TrainerLeases::EndLease(const std::string& lease_id,
                             const std::string& why, bool ranks_to_idle) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  const core::TrainerLease lease = it->second;
  leases_.erase(it);
  unknown_.erase(lease_id);
  if (ended_.size() >= kEndedLeasesKept) ended_.erase(ended_.begin());
  ended_[lease_id] = why;
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Find(lease.model);
  for (int rank : lease.ranks) {
    std::string event = why;
    if (ranks_to_idle && model.ok()) {
      ModelEntry& entry = **model;
      absl::MutexLock runtime_lock(&entry.runtime_mu);
      const core::TrainingPhase was = entry.runtime.phase_per_rank[rank];
      entry.runtime.phase_per_rank[rank] = core::TrainingPhase::kIdle;
      absl::StrAppend(&event, " in ", PhaseAndStep(was, entry.steps[rank]),
                      "; rank returned to IDLE");
      // An optimizer step cut short may have changed some shards: any
      // gather from before is stale (R7). Moved once per model, after the
      // lock (MoveCutShortSteps).
      if (was == core::TrainingPhase::kOptimizer &&
          std::find(cut_short_.begin(), cut_short_.end(), lease.model) ==
              cut_short_.end()) {
        cut_short_.push_back(lease.model);
      }
    }
    spdlog::warn("trainer model={} rank={} lease={}: {}", lease.model, rank,
                 lease_id, event);
    last_event_[{lease.model, rank}] = event;
  }
}

int TrainerLeases::ReapLapsed() {
  std::vector<std::string> lapsed;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock();
    for (const auto& [id, lease] : leases_) {
      if (core::LeaseLapsed(lease, now)) {
        lapsed.push_back(id);
      } else if (now - (lease.expires - lease.ttl) > lease.ttl / 2) {
        // Two heartbeats missed: the trainer may be cut off from this
        // daemon and stepping on.
        MarkUnknown(lease, absl::StrCat("not heard from for ",
                                        absl::FormatDuration(lease.ttl / 2)));
      }
    }
    for (const std::string& id : lapsed) {
      const core::TrainerLease& lease = leases_[id];
      for (int rank : lease.ranks) {
        lapsed_holder_[{lease.model, rank}] = lease.incarnation;
      }
      EndLease(id,
               absl::StrCat("lease of trainer '", lease.incarnation,
                            "' lapsed (no heartbeat for ",
                            absl::FormatDuration(lease.ttl), ")"),
               /*ranks_to_idle=*/true);
    }
    if (!lapsed.empty()) PersistLocked();
  }
  MoveCutShortSteps();
  return static_cast<int>(lapsed.size());
}

void TrainerLeases::MarkUnknown(const core::TrainerLease& lease,
                                const std::string& why) {
  if (unknown_.count(lease.id) > 0) return;
  unknown_[lease.id] = Unknown{lease.ranks, why};
  spdlog::warn(
      "trainer model={} incarnation={} lease={}: phases unknown ({}); "
      "sessions on the model are refused until it reports them",
      lease.model, lease.incarnation, lease.id, why);
}

void TrainerLeases::OnStall(absl::Duration gap) {
  spdlog::warn("summond did not run for {}: trainer leases extended by it",
               absl::FormatDuration(gap));
  for (auto& [id, lease] : leases_) {
    lease.expires += gap;
    MarkUnknown(lease, absl::StrCat("summond did not run for ",
                                    absl::FormatDuration(gap)));
  }
}

absl::Status TrainerLeases::CheckInterlockKnown(
    const std::string& model) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, unknown] : unknown_) {
    auto lease = leases_.find(id);
    if (lease == leases_.end() || lease->second.model != model) continue;
    return absl::UnavailableError(absl::StrCat(
        "the training interlock of model '", model, "' is unknown: trainer '",
        lease->second.incarnation, "' has not re-reported the phases of ranks ",
        absl::StrJoin(unknown.ranks, ","), " (", unknown.why,
        "); retry when it has (its next phase report or heartbeat)"));
  }
  return absl::OkStatus();
}

void TrainerLeases::PhaseKnown(const std::string& model, int rank) {
  absl::MutexLock lock(&mu_);
  const core::TrainerLease* holder = HolderOf(model, rank);
  if (holder == nullptr) return;
  auto it = unknown_.find(holder->id);
  if (it == unknown_.end()) return;
  std::vector<int>& ranks = it->second.ranks;
  ranks.erase(std::remove(ranks.begin(), ranks.end(), rank), ranks.end());
  if (ranks.empty()) {
    spdlog::info("trainer model={} incarnation={}: phases known again", model,
                 holder->incarnation);
    unknown_.erase(it);
  }
}

bool TrainerLeases::PhasesUnknown(const std::string& lease_id) const {
  absl::MutexLock lock(&mu_);
  return unknown_.count(lease_id) > 0;
}

void TrainerLeases::MoveCutShortSteps() {
  std::vector<std::string> models;
  {
    absl::MutexLock lock(&mu_);
    models.swap(cut_short_);
  }
  for (const std::string& name : models) {
    if (options_.step_cut_short) {
      options_.step_cut_short(name);
      continue;
    }
    absl::StatusOr<std::shared_ptr<ModelEntry>> model = registry_->Get(name);
    if (!model.ok()) continue;  // Deleted meanwhile: nothing to move.
    ModelEntry& entry = **model;
    absl::MutexLock runtime_lock(&entry.runtime_mu);
    for (size_t u = 0; u < entry.runtime.units.size(); ++u) {
      entry.runtime.units[u].generation =
          entry.store->BumpGeneration(static_cast<int>(u));
    }
  }
}

}  // namespace summon::server
