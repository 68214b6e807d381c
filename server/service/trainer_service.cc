#include "server/service/trainer_service.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// How long a watch sleeps between checks that its client is still there.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(200);

// Every unit's generation and external-write counter, from this node's
// shards.
template <typename Field>
void AppendUnits(ModelEntry& model, Field* out) {
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    v1::UnitGeneration* unit = out->Add();
    unit->set_unit(model.spec.units[u].fqn);
    unit->set_generation(model.store->Generation(static_cast<int>(u)));
    unit->set_external_writes(model.store->ExternalWrites(static_cast<int>(u)));
  }
}

v1::RankState RankStateOf(ModelEntry& model, TrainerLeases& trainers,
                          int rank) {
  v1::RankState state;
  state.set_rank(rank);
  {
    absl::MutexLock lock(&model.runtime_mu);
    state.set_phase(PhaseToProto(model.runtime.phase_per_rank[rank]));
    if (model.steps[rank].has_value()) state.set_step(*model.steps[rank]);
  }
  state.set_has_grads(model.grads_by_rank[rank]);
  auto [incarnation, event] = trainers.AttachmentOf(model.name, rank);
  state.set_trainer_incarnation(incarnation);
  state.set_last_event(event);
  return state;
}

}  // namespace

TrainerServiceImpl::TrainerServiceImpl(ModelRegistry* registry,
                                       SessionManager* sessions,
                                       TrainerLeases* trainers,
                                       const auth::Authorizer* authorizer,
                                       Membership* cluster)
    : registry_(registry),
      sessions_(sessions),
      trainers_(trainers),
      authorizer_(authorizer),
      forwarder_(cluster, authorizer) {}

grpc::Status TrainerServiceImpl::Attach(grpc::ServerContext* context,
                                        const v1::AttachRequest* request,
                                        v1::AttachResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/Attach", *request);
      !denied.ok()) {
    return denied;
  }
  // An attaching trainer may write its ranks' shards at once (its own
  // values into a model that exists): published versions keep them first.
  if (auto routed = forwarder_.Route(*context, &v1::Trainer::Stub::Attach,
                                     *request, response)) {
    if (routed->ok()) {
      for (int rank : request->ranks()) {
        BeforeTrainerWrites(request->model(), rank);
      }
    }
    return *routed;
  }
  std::optional<absl::Duration> lease;
  if (request->has_lease_seconds()) {
    lease = absl::Seconds(request->lease_seconds());
  }
  absl::StatusOr<TrainerLeases::Attached> attached = trainers_->Attach(
      request->model(), {request->ranks().begin(), request->ranks().end()},
      request->incarnation(), lease);
  if (!attached.ok()) return ToGrpcStatus(attached.status());
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  response->set_lease_id(attached->lease.id);
  response->set_lease_seconds(
      static_cast<uint32_t>(absl::ToInt64Seconds(attached->lease.ttl)));
  response->set_previous_incarnation(attached->previous_incarnation);
  response->set_resumed(attached->resumed);
  response->set_phases_unknown(trainers_->PhasesUnknown(attached->lease.id));
  for (int rank : attached->lease.ranks) {
    *response->add_ranks() = RankStateOf(**model, *trainers_, rank);
  }
  AppendUnits(**model, response->mutable_units());
  for (int rank : attached->lease.ranks) {
    BeforeTrainerWrites(request->model(), rank);
  }
  return grpc::Status::OK;
}

void TrainerServiceImpl::BeforeTrainerWrites(const std::string& model_name,
                                             int rank) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(model_name);
  if (!model.ok() || (*model)->store == nullptr) return;
  const std::vector<int>& local = (*model)->local_ranks;
  if (std::find(local.begin(), local.end(), rank) == local.end()) return;
  absl::ReaderMutexLock shards_lock(&(*model)->shards_mu);
  registry_->BeforeShardsWrite(**model, ModelRegistry::ShardsWrite{rank, {}, false});
}

grpc::Status TrainerServiceImpl::Heartbeat(
    grpc::ServerContext* context, const v1::TrainerHeartbeatRequest* request,
    v1::TrainerHeartbeatResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/Heartbeat", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.Route(*context, &v1::Trainer::Stub::Heartbeat,
                                     *request, response)) {
    return *routed;
  }
  absl::StatusOr<core::TrainerLease> lease =
      trainers_->Heartbeat(request->lease_id(), request->phases_unknown(),
                           request->phases_reestablished());
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  response->set_lease_seconds(
      static_cast<uint32_t>(absl::ToInt64Seconds(lease->ttl)));
  response->set_phases_unknown(trainers_->PhasesUnknown(request->lease_id()));
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(lease->model);
  if (!model.ok()) return ToGrpcStatus(model.status());
  AppendUnits(**model, response->mutable_units());
  return grpc::Status::OK;
}

grpc::Status TrainerServiceImpl::Detach(grpc::ServerContext* context,
                                        const v1::DetachRequest* request,
                                        v1::DetachResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/Detach", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.Route(*context, &v1::Trainer::Stub::Detach,
                                     *request, response)) {
    return *routed;
  }
  return ToGrpcStatus(trainers_->Detach(request->lease_id()));
}

grpc::Status TrainerServiceImpl::ReportPhase(
    grpc::ServerContext* context, const v1::ReportPhaseRequest* request,
    v1::ReportPhaseResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/ReportPhase", *request);
      !denied.ok()) {
    return denied;
  }
  // The leader knows every rank's phase before it decides an open.
  // Into OPTIMIZER, the trainer writes its rank's shards once it hears
  // back: published versions keep that rank's units first (copy on write).
  // The leader has let the rank in, so no publish comes between.
  const bool writes = request->phase() == v1::TRAINING_PHASE_OPTIMIZER ||
                      (request->has_through() &&
                       request->through() == v1::TRAINING_PHASE_OPTIMIZER);
  if (auto routed = forwarder_.Route(*context, &v1::Trainer::Stub::ReportPhase,
                                     *request, response)) {
    if (routed->ok() && writes) {
      BeforeTrainerWrites(request->model(), request->rank());
    }
    return *routed;
  }
  absl::StatusOr<core::TrainingPhase> phase =
      PhaseFromProto(request->phase(), "phase");
  if (!phase.ok()) return ToGrpcStatus(phase.status());
  std::optional<core::TrainingPhase> through;
  if (request->has_through()) {
    absl::StatusOr<core::TrainingPhase> first =
        PhaseFromProto(request->through(), "through");
    if (!first.ok()) return ToGrpcStatus(first.status());
    through = *first;
  }
  if (absl::Status leased = trainers_->CheckAndRenew(
          request->model(), request->rank(), request->lease_id());
      !leased.ok()) {
    return ToGrpcStatus(leased);
  }
  std::optional<int64_t> publish_step;
  if (request->has_publish_step()) {
    if (request->reestablishing()) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          "publish_step goes with a trainer's own end of a step, not with a "
          "re-establishing report"));
    }
    if (weight_sync_ == nullptr) {
      return ToGrpcStatus(absl::FailedPreconditionError(
          "this summond serves no weight sync (publish_step)"));
    }
    publish_step = request->publish_step();
  }
  std::optional<int64_t> step;
  if (request->has_step()) step = request->step();
  std::optional<absl::Time> deadline;
  if (request->has_deadline_ms()) {
    deadline = absl::Now() + absl::Milliseconds(request->deadline_ms());
  }
  // A combined report (`through`) is the two reports in a row, persisted
  // once: what summond knows of the rank is never behind what it answered.
  std::optional<PhaseReport> first;
  if (through.has_value()) {
    absl::StatusOr<PhaseReport> moved =
        sessions_->ReportPhase(request->model(), request->rank(), *through,
                               step, deadline, request->reestablishing());
    if (!moved.ok()) return ToGrpcStatus(moved.status());
    first = *moved;
    if (*through == core::TrainingPhase::kOptimizer) {
      BeforeTrainerWrites(request->model(), request->rank());
    }
  }
  // Held from the move that ended a step every rank asked to publish until
  // the version is taken on every node. It is taken in the same hold of the
  // manager's lock as that move, so the version is exactly the shards the
  // step left: meanwhile a trainer's move into the next step waits (R3),
  // no writable session opens, no load runs. The other ranks' IDLE reports
  // were answered before (each waits for its answer, summon.phases'
  // PhaseKeeper.report; only BETWEEN is ever deferred, and it follows a
  // FORWARD, which waits for the hold), and the last rank's report is
  // answered after the publish: with FSDP no rank could reach the next
  // OPTIMIZER before it anyway (its collectives need the last rank).
  std::optional<SessionManager::ShardWriteGuard> publish_hold;
  absl::StatusOr<PhaseReport> report = sessions_->ReportPhaseAndPublish(
      request->model(), request->rank(), *phase, step, deadline,
      request->reestablishing(), publish_step, &publish_hold);
  if (!report.ok()) {
    if (first.has_value()) {  // the rank stays in `through`
      if (!request->reestablishing()) {
        trainers_->PhaseKnown(request->model(), request->rank());
      }
      trainers_->Persist();
    }
    return ToGrpcStatus(report.status());
  }
  if (*phase == core::TrainingPhase::kOptimizer) {
    BeforeTrainerWrites(request->model(), request->rank());
  }
  // The leader knows this rank's phase again (after a restart or a stall);
  // a re-establishing trainer says so once every rank is there (Heartbeat).
  if (!request->reestablishing()) {
    trainers_->PhaseKnown(request->model(), request->rank());
  }
  trainers_->Persist();
  if (first.has_value()) {
    report->previous = first->previous;
    report->waited += first->waited;
  }
  if (report->publish.has_value()) {
    // The trainers ended the step on every rank and asked for it: the
    // version is taken now, under the hold; their next optimizer step would
    // copy every unit, so each node copies them ahead in the background.
    absl::StatusOr<PublishResult> published = weight_sync_->PublishHeld(
        request->model(), *report->publish, /*copy_ahead=*/true);
    publish_hold.reset();
    if (published.ok()) {
      response->set_published(published->version);
    } else {
      report->publish_refused = published.status();
    }
  }
  if (publish_step.has_value() && !report->publish_refused.ok()) {
    spdlog::warn("model {}: version {} asked by the trainers not published: {}",
                 request->model(), *publish_step,
                 report->publish_refused.ToString());
    response->set_publish_error(std::string(report->publish_refused.message()));
    response->set_publish_error_code(
        absl::StatusCodeToString(report->publish_refused.code()));
  }
  response->set_previous_phase(PhaseToProto(report->previous));
  response->set_phase(PhaseToProto(report->phase));
  if (report->step.has_value()) response->set_step(*report->step);
  response->set_waited_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(report->waited)));
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (model.ok()) AppendUnits(**model, response->mutable_generations());
  return grpc::Status::OK;
}

grpc::Status TrainerServiceImpl::MarkInitialized(
    grpc::ServerContext* context, const v1::MarkInitializedRequest* request,
    v1::MarkInitializedResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/MarkInitialized", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.Route(
          *context, &v1::Trainer::Stub::MarkInitialized, *request, response)) {
    return *routed;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  if (absl::Status leased =
          trainers_->CheckModelLease(request->model(), request->lease_id());
      !leased.ok()) {
    return ToGrpcStatus(leased);
  }
  if (absl::Status marked = sessions_->MarkInitialized(request->model());
      !marked.ok()) {
    return ToGrpcStatus(marked);
  }
  AppendUnits(**model, response->mutable_units());
  return grpc::Status::OK;
}

grpc::Status TrainerServiceImpl::WatchUnits(
    grpc::ServerContext* context, const v1::WatchUnitsRequest* request,
    grpc::ServerWriter<v1::WatchUnitsResponse>* writer) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/WatchUnits", *request);
      !denied.ok()) {
    return denied;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> found =
      registry_->Get(request->model());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const std::shared_ptr<ModelEntry> model = *std::move(found);
  // Counted before reading, so a change between the two is never missed.
  uint64_t seen = model->store->ChangeCount();
  v1::WatchUnitsResponse last;
  AppendUnits(*model, last.mutable_units());
  if (!writer->Write(last)) return grpc::Status::OK;
  while (!context->IsCancelled() && !stopping_.load()) {
    const uint64_t now = model->store->AwaitChange(seen, kWatchPoll);
    if (now == seen) continue;
    seen = now;
    absl::StatusOr<std::shared_ptr<ModelEntry>> current =
        registry_->Find(request->model());
    if (!current.ok() || current->get() != model.get()) {
      return ToGrpcStatus(absl::NotFoundError(absl::StrCat(
          "model '", request->model(), "' was deleted while watched")));
    }
    v1::WatchUnitsResponse next;
    AppendUnits(*model, next.mutable_units());
    bool report = false;
    for (int u = 0; u < next.units_size(); ++u) {
      const v1::UnitGeneration& before = last.units(u);
      const v1::UnitGeneration& after = next.units(u);
      report = report || after.external_writes() != before.external_writes() ||
               (request->every_change() &&
                after.generation() != before.generation());
    }
    if (!report) continue;
    if (!writer->Write(next)) return grpc::Status::OK;
    last = std::move(next);
  }
  return ToGrpcStatus(
      absl::CancelledError("the watch ended (client gone or daemon stopping)"));
}

grpc::Status TrainerServiceImpl::MapShards(grpc::ServerContext* context,
                                           const v1::MapShardsRequest* request,
                                           v1::MapShardsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Trainer/MapShards", *request);
      !denied.ok()) {
    return denied;
  }
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
  std::string detail;
  const ModelHealth health = HealthOf(model, &detail);
  if (health == ModelHealth::kDegraded) {
    // The segment's name is gone from /dev/shm: handing it out would fail
    // the trainer's shm_open with a bare FileNotFoundError. Only this
    // daemon's mapping still holds the data, until it exits.
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "model '", model.name, "' is DEGRADED, so its shards are not handed "
        "out: ", detail, ". Recover: `summonctl model save ", model.name,
        " --to CKPT` now, `summonctl model delete ", model.name,
        " --force`, restart the trainer (it creates the model again), then "
        "`summonctl model load ", model.name, " --from CKPT`")));
  }
  response->set_state(ModelStateToProto(health));
  response->set_incarnation(model.store->incarnation());
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
  if (params->device >= 0) {
    response->set_device_ordinal(params->device);
    response->set_device_bytes(params->device_bytes);
    response->set_params_ipc_handle(params->ipc_handle);
    if (grads != nullptr) response->set_grads_ipc_handle(grads->ipc_handle);
  }
  const int position = model.spec.groups.PositionOf(rank);
  for (size_t u = 0; u < model.spec.units.size(); ++u) {
    const int unit_index = static_cast<int>(u);
    const core::FlatParamLayout& layout = model.spec.units[u].layout;
    v1::UnitShard* unit = response->add_units();
    unit->set_unit(model.spec.units[u].fqn);
    unit->set_dtype(DTypeToProto(layout.dtype()));
    unit->set_group_size(layout.group_size());
    unit->set_position(position);
    unit->set_chunk_numel(layout.chunk_numel());
    unit->set_shard_flat_offset(int64_t{position} * layout.chunk_numel());
    unit->set_unpadded_numel(layout.unpadded_numel());
    unit->set_kind(LayoutKindToProto(layout.kind()));
    unit->set_params_offset(params->unit_offsets[u]);
    if (grads != nullptr) unit->set_grads_offset(grads->unit_offsets[u]);
    unit->set_generation(model.store->Generation(unit_index));
    unit->set_external_writes(model.store->ExternalWrites(unit_index));
    AppendParameters(model.spec, unit_index, unit->mutable_layout());
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const core::ShardSlice slice =
          layout.SliceOf(static_cast<int>(p), position);
      const bool fsdp2 = layout.kind() == core::LayoutKind::kFsdp2;
      // An FSDP2 parameter keeps its padded storage even where its chunk is
      // empty, and a trainer binds every one.
      if (!slice.in_shard && !fsdp2) continue;
      const core::FlatParamEntry& param = layout.params()[p];
      v1::ParamShard* shard = unit->add_params();
      shard->mutable_info()->set_fqn(param.fqn);
      shard->mutable_info()->set_dtype(DTypeToProto(param.dtype));
      for (int64_t dim : param.shape) shard->mutable_info()->add_shape(dim);
      shard->mutable_info()->set_numel(param.numel);
      shard->set_element_offset(slice.intra_start);
      shard->set_numel(slice.numel_in_shard);
      shard->set_offset_in_shard(fsdp2 ? param.flat_offset
                                       : slice.offset_in_shard);
      for (int64_t dim : layout.LocalShape(static_cast<int>(p), position)) {
        shard->add_local_shape(dim);
      }
      for (int64_t dim :
           layout.PaddedLocalShape(static_cast<int>(p), position)) {
        shard->add_padded_local_shape(dim);
      }
      if (fsdp2) shard->set_shard_dim(param.shard_dim);
    }
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
