#include "server/watch/watcher.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace summon::server {

Watcher::Watcher(WatchStore* store, WatchNodes* nodes,
                 metrics::Registry* metrics, StepProbe probe,
                 WatchReplication* replication)
    : store_(store),
      nodes_(nodes),
      probe_(std::move(probe)),
      replication_(replication),
      metrics_(metrics) {
  if (metrics_ != nullptr) {
    skipped_ = metrics_->Counter(
        "summon_watch_skipped_total",
        "Watched steps not recorded: reason=stale, the next optimizer step "
        "began before the shards were read; reason=queue, a newer step of "
        "the model replaced it while it waited",
        {"model", "reason"});
    nonfinite_ = metrics_->Counter(
        "summon_watch_nonfinite_total",
        "Watched parameters whose record first held a NaN or Inf",
        {"model", "param"});
    // Watched parameters only, from the store at each scrape: the
    // cardinality is what the watches name.
    norm_gauge_ = metrics_->CallbackGauge(
        "summon_watch_l2_norm", "A watched parameter's last recorded L2 norm",
        {"model", "param"}, [store] {
          metrics::Registry::Samples samples;
          for (const WatchInfo& info : store->List()) {
            for (const std::string& param : info.spec.watched) {
              absl::StatusOr<WatchHistory> history =
                  store->Show(info.spec.model, param, false, 0);
              if (!history.ok() || history->records.empty()) continue;
              samples.push_back({{info.spec.model, param},
                                 history->records.back().stats.l2_norm});
            }
          }
          return samples;
        });
  }
  thread_ = std::thread([this] { Run(); });
}

Watcher::~Watcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  if (metrics_ != nullptr) metrics_->RemoveCallback(norm_gauge_);
}

void Watcher::Notify(const std::string& model, int64_t step, absl::Time ended) {
  const std::optional<WatchSpec> spec = store_->Get(model);
  if (!spec.has_value() || step % std::max(spec->every, 1) != 0) return;
  std::optional<Job> replaced;
  {
    absl::MutexLock lock(&mu_);
    auto pending =
        std::find_if(queue_.begin(), queue_.end(),
                     [&](const Job& job) { return job.model == model; });
    if (pending == queue_.end()) {
      queue_.push_back(Job{model, step, ended});
    } else {
      replaced = std::move(*pending);
      *pending = Job{model, step, ended};
    }
  }
  if (replaced.has_value()) {
    Skip(*replaced, "queue",
         absl::StrCat("step ", step, " replaced it while it waited").c_str());
  }
}

size_t Watcher::pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void Watcher::Skip(const Job& job, const char* reason, const char* why) {
  // A trainer faster than its record replaces a step at every step: that
  // is the bound working, counted, not worth a warning each time.
  spdlog::log(std::string_view(reason) == "queue" ? spdlog::level::debug
                                                  : spdlog::level::warn,
              "watch of model {}: step {} skipped, {}", job.model, job.step,
              why);
  if (skipped_ != nullptr) skipped_->Add({job.model, reason});
}

void Watcher::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Watcher* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && self->busy_ == 0;
      },
      this));
}

void Watcher::Run() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Watcher* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return !self->queue_.empty() || self->stopping_;
          },
          this));
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    RecordStep(job);
    absl::MutexLock lock(&mu_);
    --busy_;
  }
}

namespace {

// Every node's partials for the request, combined.
absl::StatusOr<std::vector<core::WatchPartial>> Combined(
    WatchNodes& nodes, const WatchPartialsRequest& request) {
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> per_node =
      nodes.Partials(request);
  if (!per_node.ok()) return per_node.status();
  std::vector<core::WatchPartial> combined;
  for (size_t i = 0; i < request.params.size(); ++i) {
    const bool binned = request.bins > 0 && i < request.ranges.size() &&
                        request.ranges[i].has_value();
    combined.push_back(core::EmptyWatchPartial(request.bins, binned));
  }
  for (const std::vector<core::WatchPartial>& node : *per_node) {
    if (node.size() != combined.size()) {
      return absl::InternalError("a node answered for other parameters");
    }
    for (size_t i = 0; i < node.size(); ++i) {
      if (absl::Status added =
              core::CombineWatchPartials(node[i], &combined[i]);
          !added.ok()) {
        return added;
      }
    }
  }
  return combined;
}

}  // namespace

void Watcher::RecordStep(const Job& job) {
  const std::optional<WatchSpec> spec = store_->Get(job.model);
  if (!spec.has_value()) return;
  // The shards hold step `job.step` only until a rank enters OPTIMIZER
  // again: a record read before or across that would be another step's (or
  // torn). Such a step is skipped, never mislabelled; the trainer is never
  // held up for it.
  const auto still_that_step = [&] {
    if (!probe_) return true;
    const StepState state = probe_(job.model);
    return !state.in_optimizer && state.done_step == job.step;
  };
  const auto skip = [&] {
    Skip(job, "stale",
         "the next optimizer step began before its shards were read");
  };
  if (!still_that_step()) return skip();
  std::vector<std::pair<std::pair<std::string, bool>, WatchRecord>> records;
  for (const bool grad : {false, true}) {
    if (grad && !spec->grads) continue;
    WatchPartialsRequest request;
    request.model = job.model;
    request.params = spec->watched;
    request.grad = grad;
    request.bins = spec->bins;
    bool first_pass = false;
    const auto key_of = [&](const std::string& param) {
      return RangeKey{job.model, absl::ToUnixNanos(spec->created_at), param,
                      grad};
    };
    for (const std::string& param : spec->watched) {
      std::optional<core::HistogramRange> range =
          store_->NextRange(job.model, param, grad);
      if (range.has_value()) {
        found_ranges_.erase(key_of(param));
      } else if (auto found = found_ranges_.find(key_of(param));
                 found != found_ranges_.end()) {
        range = found->second;
      }
      request.ranges.push_back(range);
      first_pass = first_pass || !range.has_value();
    }
    absl::StatusOr<std::vector<core::WatchPartial>> combined =
        Combined(*nodes_, request);
    if (combined.ok() && first_pass && spec->bins > 0) {
      // Parameters without a previous record: this pass found their range;
      // a second one bins them (the others keep their counts).
      WatchPartialsRequest second = request;
      std::vector<size_t> redo;
      second.params.clear();
      second.ranges.clear();
      for (size_t i = 0; i < request.params.size(); ++i) {
        if (request.ranges[i].has_value()) continue;
        const std::optional<core::HistogramRange> range =
            core::NextHistogramRange(
                core::FinishWatchStatistics((*combined)[i], std::nullopt));
        if (!range.has_value()) continue;  // No finite element to bin.
        redo.push_back(i);
        second.params.push_back(request.params[i]);
        second.ranges.push_back(range);
        request.ranges[i] = range;
        found_ranges_[key_of(request.params[i])] = *range;
      }
      // A step that moved on during the range pass is not binned (the
      // ranges found are kept for the next step).
      if (!still_that_step()) return skip();
      absl::StatusOr<std::vector<core::WatchPartial>> binned =
          redo.empty() ? std::vector<core::WatchPartial>{}
                       : Combined(*nodes_, second);
      if (!binned.ok()) {
        combined = binned.status();
      } else {
        for (size_t j = 0; j < redo.size(); ++j) {
          (*combined)[redo[j]] = std::move((*binned)[j]);
        }
      }
    }
    if (!combined.ok()) {
      spdlog::error("watch of model {} at step {}: {}", job.model, job.step,
                    combined.status().ToString());
      return;
    }
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < combined->size(); ++i) {
      WatchRecord record;
      record.step = job.step;
      record.recorded_at = now;
      record.latency = now - job.ended;
      record.stats =
          core::FinishWatchStatistics((*combined)[i], request.ranges[i]);
      records.push_back({{request.params[i], grad}, std::move(record)});
    }
  }
  if (!still_that_step()) return skip();
  absl::StatusOr<WatchStore::Recorded> recorded =
      store_->Record(job.model, spec->created_at, std::move(records));
  if (!recorded.ok()) {
    spdlog::error("watch of model {} at step {} not persisted: {}", job.model,
                  job.step, recorded.status().ToString());
    return;
  }
  if (replication_ != nullptr && recorded->chunk.has_value()) {
    replication_->PushRecord(*recorded->chunk);
  }
  for (const auto& [param, grad] : recorded->first_nonfinite) {
    spdlog::warn("watch: {}{} of model {} holds NaN or Inf since step {}",
                 grad ? "the gradient of " : "", param, job.model, job.step);
    if (nonfinite_ != nullptr) nonfinite_->Add({job.model, param});
  }
}

}  // namespace summon::server
