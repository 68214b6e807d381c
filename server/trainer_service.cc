#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/proto_conversion.h"
#include "server/status_conversion.h"
#include "server/summon_service.h"

namespace summon::server {

TrainerServiceImpl::TrainerServiceImpl(ModelRegistry* registry,
                                       SessionManager* sessions,
                                       Membership* cluster)
    : registry_(registry),
      sessions_(sessions),
      cluster_(cluster),
      forwarder_(cluster) {}

grpc::Status TrainerServiceImpl::ReportPhase(
    grpc::ServerContext* context, const v1::ReportPhaseRequest* request,
    v1::ReportPhaseResponse* response) {
  // The leader knows every rank's phase before it decides an open.
  if (cluster_ != nullptr) {
    if (absl::Status ready = cluster_->CheckReady(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    if (!cluster_->is_leader()) {
      auto stub = forwarder_.Trainer();
      return forwarder_.Unary(*context, *stub, &v1::Trainer::Stub::ReportPhase,
                              *request, response);
    }
  }
  absl::StatusOr<core::TrainingPhase> phase =
      PhaseFromProto(request->phase(), "phase");
  if (!phase.ok()) return ToGrpcStatus(phase.status());
  std::optional<int64_t> step;
  if (request->has_step()) step = request->step();
  std::optional<absl::Time> deadline;
  if (request->has_deadline_ms()) {
    deadline = absl::Now() + absl::Milliseconds(request->deadline_ms());
  }
  absl::StatusOr<PhaseReport> report = sessions_->ReportPhase(
      request->model(), request->rank(), *phase, step, deadline);
  if (!report.ok()) return ToGrpcStatus(report.status());
  response->set_previous_phase(PhaseToProto(report->previous));
  response->set_phase(PhaseToProto(report->phase));
  if (report->step.has_value()) response->set_step(*report->step);
  response->set_waited_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(report->waited)));
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (model.ok()) {
    absl::MutexLock lock(&(*model)->runtime_mu);
    for (const core::UnitRuntimeState& unit : (*model)->runtime.units) {
      v1::UnitGeneration* entry = response->add_generations();
      entry->set_unit(unit.fqn);
      entry->set_generation(unit.generation);
    }
  }
  return grpc::Status::OK;
}

grpc::Status TrainerServiceImpl::MapShards(grpc::ServerContext*,
                                           const v1::MapShardsRequest* request,
                                           v1::MapShardsResponse* response) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(request->model());
  if (!found.ok()) return ToGrpcStatus(found.status());
  ModelEntry& model = **found;
  const int rank = request->rank();
  if (rank < 0 || rank >= model.spec.groups.topology.world_size()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the world of ",
                     model.spec.groups.topology.world_size(), " ranks")));
  }
  if (std::find(model.local_ranks.begin(), model.local_ranks.end(), rank) ==
      model.local_ranks.end()) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " is not hosted by this node; map it on its own node")));
  }
  response->set_model(model.name);
  response->set_rank(rank);
  response->set_world_size(model.spec.groups.topology.world_size());
  const std::vector<ShardStore::SegmentDescription> segments =
      model.store->Describe(rank);
  const ShardStore::SegmentDescription* params = nullptr;
  const ShardStore::SegmentDescription* grads = nullptr;
  for (const ShardStore::SegmentDescription& segment : segments) {
    (segment.grads ? grads : params) = &segment;
  }
  if (params == nullptr) {
    return ToGrpcStatus(
        absl::InternalError(absl::StrCat("no params segment for rank ", rank)));
  }
  response->set_segment_name(params->name);
  response->set_segment_bytes(params->size);
  if (grads != nullptr) {
    response->set_grads_segment_name(grads->name);
    response->set_grads_segment_bytes(grads->size);
  }
  const int position = model.spec.groups.PositionOf(rank);
  absl::MutexLock lock(&model.runtime_mu);
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    const core::FlatParamLayout& layout = model.spec.units[u].layout;
    v1::UnitShard* unit = response->add_units();
    unit->set_unit(model.spec.units[u].fqn);
    unit->set_dtype(DTypeToProto(layout.dtype()));
    unit->set_group_size(layout.group_size());
    unit->set_position(position);
    unit->set_chunk_numel(layout.chunk_numel());
    unit->set_params_offset(params->unit_offsets[u]);
    if (grads != nullptr) unit->set_grads_offset(grads->unit_offsets[u]);
    unit->set_generation(model.runtime.units[u].generation);
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const core::ShardSlice slice =
          layout.SliceOf(static_cast<int>(p), position);
      if (!slice.in_shard) continue;
      const core::FlatParamEntry& param = layout.params()[p];
      v1::ParamShard* shard = unit->add_params();
      shard->mutable_info()->set_fqn(param.fqn);
      shard->mutable_info()->set_dtype(DTypeToProto(param.dtype));
      for (int64_t dim : param.shape) shard->mutable_info()->add_shape(dim);
      shard->mutable_info()->set_numel(param.numel);
      shard->set_element_offset(slice.intra_start);
      shard->set_numel(slice.numel_in_shard);
      shard->set_offset_in_shard(slice.offset_in_shard);
    }
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
