#include "server/service/cluster_watch_nodes.h"

#include <cmath>
#include <future>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor_stats.h"
#include "server/rpc/status_conversion.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {

v1::NodeWatchPartialsRequest WatchPartialsRequestToProto(
    const WatchPartialsRequest& request) {
  v1::NodeWatchPartialsRequest out;
  out.set_model(request.model);
  for (const std::string& param : request.params) out.add_params(param);
  out.set_grad(request.grad);
  out.set_bins(request.bins);
  for (const std::optional<core::HistogramRange>& range : request.ranges) {
    out.add_binned(range.has_value());
    out.add_lower(range.has_value() ? range->lower : 0);
    out.add_upper(range.has_value() ? range->upper : 0);
  }
  return out;
}

WatchPartialsRequest WatchPartialsRequestFromProto(
    const v1::NodeWatchPartialsRequest& request) {
  WatchPartialsRequest out;
  out.model = request.model();
  out.params.assign(request.params().begin(), request.params().end());
  out.grad = request.grad();
  out.bins = request.bins();
  for (int i = 0; i < request.binned_size(); ++i) {
    if (request.binned(i) && i < request.lower_size() &&
        i < request.upper_size()) {
      out.ranges.push_back(
          core::HistogramRange{request.lower(i), request.upper(i)});
    } else {
      out.ranges.push_back(std::nullopt);
    }
  }
  return out;
}

absl::Status CheckWatchPartialsRequest(const WatchPartialsRequest& request) {
  if (absl::Status bins =
          core::CheckStatisticsArguments(core::DType::kFloat32, request.bins);
      !bins.ok()) {
    return bins;
  }
  if (request.ranges.size() > request.params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.ranges.size(), " histogram ranges for ",
                     request.params.size(), " parameters"));
  }
  for (size_t i = 0; i < request.ranges.size(); ++i) {
    const std::optional<core::HistogramRange>& range = request.ranges[i];
    if (range.has_value() &&
        !(std::isfinite(range->lower) && std::isfinite(range->upper) &&
          range->lower <= range->upper)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram range of '", request.params[i], "' is [", range->lower,
          ", ", range->upper, "]: it must be finite with lower <= upper"));
    }
  }
  return absl::OkStatus();
}

void WatchPartialToProto(const core::WatchPartial& partial,
                         v1::WatchPartial* out) {
  out->set_numel(partial.numel);
  out->set_finite(partial.finite);
  out->set_nan_count(partial.nan_count);
  out->set_inf_count(partial.inf_count);
  out->set_sum(partial.sum);
  out->set_sum_of_squares(partial.sum_of_squares);
  out->set_min(partial.min);
  out->set_max(partial.max);
  out->set_abs_max(partial.abs_max);
  for (int64_t count : partial.histogram) out->add_histogram(count);
  out->set_below_range(partial.below_range);
  out->set_above_range(partial.above_range);
}

core::WatchPartial WatchPartialFromProto(const v1::WatchPartial& partial) {
  core::WatchPartial out;
  out.numel = partial.numel();
  out.finite = partial.finite();
  out.nan_count = partial.nan_count();
  out.inf_count = partial.inf_count();
  out.sum = partial.sum();
  out.sum_of_squares = partial.sum_of_squares();
  out.min = partial.min();
  out.max = partial.max();
  out.abs_max = partial.abs_max();
  out.histogram.assign(partial.histogram().begin(), partial.histogram().end());
  out.below_range = partial.below_range();
  out.above_range = partial.above_range();
  return out;
}

absl::StatusOr<std::vector<std::vector<core::WatchPartial>>>
ClusterWatchNodes::Partials(const WatchPartialsRequest& request) {
  v1::NodeWatchPartialsRequest proto = WatchPartialsRequestToProto(request);
  proto.set_epoch(membership_->epoch());
  // The other nodes read their shards while this one reads its own.
  std::vector<std::future<absl::StatusOr<std::vector<core::WatchPartial>>>>
      remote;
  for (int node = 0; node < membership_->size(); ++node) {
    if (node == membership_->node_rank()) continue;
    remote.push_back(std::async(
        std::launch::async,
        [this, node, &proto]()
            -> absl::StatusOr<std::vector<core::WatchPartial>> {
          grpc::ClientContext context;
          context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          v1::NodeWatchPartialsResponse response;
          const absl::Status status = FromGrpcStatus(
              v1::Peer::NewStub(membership_->ChannelTo(node))
                  ->NodeWatchPartials(&context, proto, &response));
          if (!status.ok()) {
            return absl::Status(status.code(),
                                absl::StrCat("node ", node, ": ",
                                             status.message()));
          }
          std::vector<core::WatchPartial> partials;
          for (const v1::WatchPartial& partial : response.partials()) {
            partials.push_back(WatchPartialFromProto(partial));
          }
          return partials;
        }));
  }
  absl::StatusOr<std::vector<std::vector<core::WatchPartial>>> all =
      local_.Partials(request);
  for (auto& future : remote) {
    absl::StatusOr<std::vector<core::WatchPartial>> partials = future.get();
    if (!all.ok()) continue;
    if (!partials.ok()) {
      all = partials.status();
      continue;
    }
    all->push_back(*std::move(partials));
  }
  return all;
}

}  // namespace summon::server
