// Summon's watch calls: they only translate; the watches and their history
// are server/watch/'s WatchStore on the leader (followers forward), copied
// to every follower's store by WatchReplication.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor_stats.h"
#include "server/rpc/status_conversion.h"
#include "server/service/summon_service.h"

namespace summon::server {
namespace {

void WatchToProto(const WatchInfo& info, int history, v1::Watch* out) {
  const WatchSpec& spec = info.spec;
  out->set_model(spec.model);
  for (const std::string& glob : spec.globs) out->add_params(glob);
  out->set_every(spec.every);
  out->set_histogram_bins(spec.bins);
  out->set_grads(spec.grads);
  for (const std::string& fqn : spec.watched) out->add_watched(fqn);
  out->set_history(history);
  out->set_last_step(info.last_step.value_or(-1));
  out->set_created_by(spec.created_by);
  out->set_created_at_unix_ms(absl::ToUnixMillis(spec.created_at));
}

void RecordToProto(const WatchRecord& record, v1::WatchRecord* out) {
  const core::WatchStatistics& s = record.stats;
  out->set_step(record.step);
  out->set_recorded_at_unix_ms(absl::ToUnixMillis(record.recorded_at));
  out->set_numel(s.numel);
  out->set_l2_norm(s.l2_norm);
  out->set_mean(s.mean);
  out->set_min(s.min);
  out->set_max(s.max);
  out->set_abs_max(s.abs_max);
  out->set_nan_count(s.nan_count);
  out->set_inf_count(s.inf_count);
  if (s.range.has_value()) {
    v1::Histogram* histogram = out->mutable_histogram();
    histogram->set_lower(s.range->lower);
    histogram->set_upper(s.range->upper);
    for (int64_t count : s.histogram) histogram->add_counts(count);
  }
  out->set_below_range(s.below_range);
  out->set_above_range(s.above_range);
  out->set_latency_us(absl::ToInt64Microseconds(record.latency));
}

}  // namespace

grpc::Status SummonServiceImpl::AddWatch(grpc::ServerContext* context,
                                         const v1::AddWatchRequest* request,
                                         v1::Watch* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/AddWatch", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::AddWatch, *request, response)) {
    return *routed;
  }
  if (watches_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this daemon keeps no watches");
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  const int every = request->every() == 0 ? 1 : request->every();
  if (every < 1) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("every must be >= 1 (--every N, every), "
                                     "got ",
                                     every));
  }
  // The histogram's limits are the statistics' own (TensorStats); every
  // parameter is floating-point (R14).
  if (absl::Status valid = core::CheckStatisticsArguments(
          core::DType::kFloat32, request->histogram_bins());
      !valid.ok()) {
    return ToGrpcStatus(valid);
  }
  WatchSpec spec;
  spec.model = request->model();
  spec.globs.assign(request->params().begin(), request->params().end());
  spec.every = every;
  spec.bins = request->histogram_bins();
  spec.grads = request->grads();
  // Primary parameters in the model's order (aliases are stored once).
  for (const core::UnitSpec& unit : (*model)->spec.units) {
    for (const core::FlatParamEntry& param : unit.layout.params()) {
      const bool matched =
          spec.globs.empty() ||
          std::any_of(spec.globs.begin(), spec.globs.end(),
                      [&](const std::string& glob) {
                        return WatchGlobMatches(glob, param.fqn);
                      });
      if (matched) spec.watched.push_back(param.fqn);
    }
  }
  if (spec.watched.empty()) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("no parameter of model '", spec.model, "' matches ",
                     absl::StrJoin(spec.globs, " ")));
  }
  if (spec.grads) {
    const std::vector<bool>& grads = (*model)->grads_by_rank;
    if (std::find(grads.begin(), grads.end(), true) == grads.end()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("model '", spec.model,
                       "' has no grads segment (a trainer attaches with "
                       "grads)"));
    }
  }
  spec.created_by = PrincipalOf(*context);
  spec.created_at = absl::Now();
  WatchInfo info{spec, std::nullopt};
  if (absl::Status added = watches_->Add(std::move(spec)); !added.ok()) {
    return ToGrpcStatus(added);
  }
  if (watch_replication_ != nullptr) {
    watch_replication_->PushModel(info.spec.model);
  }
  // As stored (whole milliseconds, as every node keeps it).
  if (std::optional<WatchSpec> stored = watches_->Get(info.spec.model)) {
    info.spec = *std::move(stored);
  }
  WatchToProto(info, watches_->history(), response);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::ListWatches(
    grpc::ServerContext* context, const v1::ListWatchesRequest* request,
    v1::ListWatchesResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ListWatches", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.RouteListing(
          *context, &v1::Summon::Stub::ListWatches, *request, response)) {
    return *routed;
  }
  std::map<std::string, std::pair<v1::ModelState, std::string>> no_models;
  for (int node : FoldReachableHealth(&no_models)) {
    response->add_nodes_down(node);
  }
  if (watches_ == nullptr) return grpc::Status::OK;
  for (const WatchInfo& info : watches_->List()) {
    WatchToProto(info, watches_->history(), response->add_watches());
  }
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::RemoveWatch(
    grpc::ServerContext* context, const v1::RemoveWatchRequest* request,
    v1::RemoveWatchResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/RemoveWatch", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = Route(*context, &v1::Summon::Stub::RemoveWatch, *request,
                          response)) {
    return *routed;
  }
  if (watches_ == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("model '", request->model(),
                                     "' has no watch"));
  }
  if (absl::Status removed = watches_->Remove(request->model());
      !removed.ok()) {
    return ToGrpcStatus(removed);
  }
  if (watch_replication_ != nullptr) {
    watch_replication_->PushModel(request->model());
  }
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::ShowWatch(grpc::ServerContext* context,
                                          const v1::ShowWatchRequest* request,
                                          v1::ShowWatchResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ShowWatch", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::ShowWatch, *request, response)) {
    return *routed;
  }
  if (watches_ == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("model '", request->model(),
                                     "' has no watch"));
  }
  absl::StatusOr<WatchHistory> history = watches_->Show(
      request->model(), request->param(), request->grad(), request->since());
  if (!history.ok()) return ToGrpcStatus(history.status());
  response->set_model(request->model());
  response->set_param(request->param());
  response->set_grad(request->grad());
  for (const WatchRecord& record : history->records) {
    RecordToProto(record, response->add_records());
  }
  response->set_first_nonfinite_step(
      history->first_nonfinite_step.value_or(-1));
  return grpc::Status::OK;
}

}  // namespace summon::server
