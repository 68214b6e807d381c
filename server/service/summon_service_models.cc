// Summon's model RPCs: list, describe, create, load, save, checksum and
// delete. In a cluster the leader applies each model operation on every node
// (summon_service_fanout.cc).
#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/checkpoint/checkpoint.h"
#include "server/metrics/summon_metrics.h"
#include "server/rpc/status_conversion.h"
#include "server/service/peer_service.h"
#include "server/service/proto_conversion.h"
#include "server/service/summon_service.h"

namespace summon::server {

grpc::Status SummonServiceImpl::ListModels(grpc::ServerContext* context,
                                           const v1::ListModelsRequest* request,
                                           v1::ListModelsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ListModels", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.RouteListing(
          *context, &v1::Summon::Stub::ListModels, *request, response)) {
    return *routed;
  }
  std::map<std::string, std::pair<v1::ModelState, std::string>> states;
  for (const std::shared_ptr<ModelEntry>& model : registry_->List()) {
    v1::ModelSummary* summary = response->add_models();
    summary->set_name(model->name);
    summary->set_strategy(StrategyToProto(model->spec.groups.declared));
    summary->set_world_size(model->spec.groups.topology.world_size());
    summary->set_unit_count(static_cast<int>(model->spec.units.size()));
    int params = 0;
    int64_t numel = 0;
    for (const core::UnitSpec& unit : model->spec.units) {
      params += static_cast<int>(unit.layout.params().size());
      for (const core::FlatParamEntry& param : unit.layout.params()) {
        numel += param.numel;
      }
    }
    summary->set_param_count(params);
    summary->set_numel(numel);
    std::string detail;
    states[model->name] = {ModelStateToProto(HealthOf(*model, &detail)),
                           detail};
    absl::MutexLock lock(&model->runtime_mu);
    summary->set_open_sessions(model->open_sessions);
  }
  // A follower's segments are the model's too (an unlinked one, shards
  // lost in its restart): the state is the cluster's, not this node's, as
  // far as the nodes that answer tell.
  for (int node : FoldReachableHealth(&states)) {
    response->add_nodes_down(node);
  }
  for (v1::ModelSummary& summary : *response->mutable_models()) {
    const auto& [state, detail] = states[summary.name()];
    summary.set_state(state);
    summary.set_state_detail(detail);
  }
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::DescribeModel(
    grpc::ServerContext* context, const v1::DescribeModelRequest* request,
    v1::Model* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/DescribeModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = Route(*context, &v1::Summon::Stub::DescribeModel, *request,
                          response)) {
    return *routed;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Find(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  DescribeToProto(**model, response);
  std::map<std::string, std::pair<v1::ModelState, std::string>> states = {
      {response->name(), {response->state(), response->state_detail()}}};
  if (absl::Status status = FoldClusterHealth(&states); !status.ok()) {
    return ToGrpcStatus(status);
  }
  response->set_state(states[response->name()].first);
  response->set_state_detail(states[response->name()].second);
  return grpc::Status::OK;
}

void SummonServiceImpl::DescribeToProto(ModelEntry& model,
                                        v1::Model* response) const {
  ModelToProto(model, response);
  for (v1::RankState& rank : *response->mutable_ranks()) {
    auto [incarnation, event] =
        trainers_->AttachmentOf(model.name, rank.rank());
    rank.set_trainer_incarnation(incarnation);
    rank.set_last_event(event);
  }
}

grpc::Status SummonServiceImpl::CreateModel(
    grpc::ServerContext* context, const v1::CreateModelRequest* request,
    v1::Model* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/CreateModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::CreateModel, *request, response)) {
    return *routed;
  }
  if (absl::Status status = CreateEverywhere(*request); !status.ok()) {
    return ToGrpcStatus(status);
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->name());
  if (!model.ok()) return ToGrpcStatus(model.status());
  DescribeToProto(**model, response);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::LoadModel(grpc::ServerContext* context,
                                          const v1::LoadModelRequest* request,
                                          v1::LoadModelResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/LoadModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::LoadModel, *request, response)) {
    return *routed;
  }
  absl::StatusOr<std::string> resolved =
      checkpoint_roots_.Resolve(request->path());
  if (!resolved.ok()) return ToGrpcStatus(resolved.status());
  const std::string& path = *resolved;
  std::optional<core::DType> cast_to;
  if (request->dtype() != v1::DTYPE_UNSPECIFIED) {
    absl::StatusOr<core::DType> parsed =
        DTypeFromProto(request->dtype(), "dtype");
    if (!parsed.ok()) return ToGrpcStatus(parsed.status());
    cast_to = *parsed;
  }
  if (!request->skip().empty() && !request->has_create()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "skip applies only to a load that creates the model (create set); "
        "a load into a model ignores tensors it does not have"));
  }
  if (request->has_create()) {
    const v1::CheckpointWrapRule& rule = request->create();
    core::Strategy strategy = core::Strategy::kFullShard;
    if (rule.strategy() != v1::SHARDING_STRATEGY_UNSPECIFIED) {
      absl::StatusOr<core::Strategy> parsed =
          StrategyFromProto(rule.strategy(), "create.strategy");
      if (!parsed.ok()) return ToGrpcStatus(parsed.status());
      strategy = *parsed;
    }
    absl::StatusOr<std::string> layout = LayoutJsonFromCheckpoint(
        path, {rule.unit_prefixes().begin(), rule.unit_prefixes().end()},
        strategy, rule.has_use_orig_params() ? rule.use_orig_params() : true,
        NonFloatingTensors::kReject, request->skip(), cast_to,
        checkpoint_roots_.Admission());
    if (!layout.ok()) return ToGrpcStatus(layout.status());
    v1::CreateModelRequest create;
    create.set_name(request->model());
    create.set_layout_json(*layout);
    create.set_strategy(StrategyToProto(strategy));
    if (request->has_grads()) *create.mutable_grads() = request->grads();
    if (absl::Status status = CreateEverywhere(create); !status.ok()) {
      return ToGrpcStatus(status);
    }
  } else if (request->has_grads()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "grads applies only to a load that creates the model (create set)"));
  }
  // A MISSING_SHARDS model gets fresh shards here, refilled by the load.
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->GetRecreatingShards(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  // R15: the load writes every shard, so it takes the model like a
  // writable session (refused mid-step; trainers wait while it runs), and
  // not while a trainer may be mid-step unheard.
  if (absl::Status known = trainers_->CheckInterlockKnown(request->model());
      !known.ok()) {
    return ToGrpcStatus(known);
  }
  absl::StatusOr<SessionManager::ShardWriteGuard> guard =
      sessions_->LockForShardWrite(*model, "load of a checkpoint");
  if (!guard.ok()) return ToGrpcStatus(guard.status());
  if (cast_to.has_value()) {
    for (const core::UnitSpec& unit : (*model)->spec.units) {
      if (unit.layout.params().empty() || unit.layout.dtype() == *cast_to) {
        continue;
      }
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("model '", request->model(), "' stores unit '", unit.fqn,
                       "' as ", core::DTypeName(unit.layout.dtype()), ", not ",
                       core::DTypeName(*cast_to),
                       ": a load converts tensors to the "
                       "parameters' dtype")));
    }
  }
  absl::StatusOr<int64_t> bytes =
      LoadEverywhere(**model, path, cast_to.has_value());
  if (!bytes.ok()) {
    if (request->has_create()) {
      DeleteEverywhere(request->model()).IgnoreError();
    }
    return ToGrpcStatus(bytes.status());
  }
  DescribeToProto(**model, response->mutable_model());
  response->set_bytes_read(*bytes);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::SaveModel(grpc::ServerContext* context,
                                          const v1::SaveModelRequest* request,
                                          v1::SaveModelResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/SaveModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::SaveModel, *request, response)) {
    return *routed;
  }
  absl::StatusOr<std::string> path = checkpoint_roots_.Resolve(request->path());
  if (!path.ok()) return ToGrpcStatus(path.status());
  if (request->max_file_bytes() > static_cast<uint64_t>(INT64_MAX)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "the file size cap is too large (--max-file-bytes N, max_file_bytes): "
        "at most 2^63 - 1"));
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  if (!request->overwrite()) {
    absl::StatusOr<CheckpointFiles> plan = registry_->PlanSave(
        **model, *path, static_cast<int64_t>(request->max_file_bytes()));
    if (!plan.ok()) return ToGrpcStatus(plan.status());
    std::vector<const PlannedCheckpointFile*> targets;
    for (const PlannedCheckpointFile& file : plan->files) {
      targets.push_back(&file);
    }
    if (plan->index.has_value()) targets.push_back(&*plan->index);
    for (const PlannedCheckpointFile* file : targets) {
      std::error_code error;
      if (std::filesystem::exists(
              std::filesystem::symlink_status(file->path, error))) {
        return ToGrpcStatus(absl::AlreadyExistsError(
            absl::StrCat("checkpoint file '", file->path,
                         "' exists; save with overwrite to replace it")));
      }
    }
  }
  std::vector<std::string> files;
  if (cluster_ == nullptr) {
    absl::StatusOr<std::vector<std::string>> saved = registry_->SaveCheckpoint(
        **model, *path, static_cast<int64_t>(request->max_file_bytes()));
    if (!saved.ok()) return ToGrpcStatus(saved.status());
    files = *std::move(saved);
  } else {
    absl::StatusOr<std::vector<std::string>> saved = SaveEverywhere(
        **model, *path, static_cast<int64_t>(request->max_file_bytes()));
    if (!saved.ok()) return ToGrpcStatus(saved.status());
    files = *std::move(saved);
  }
  int64_t bytes = 0;
  for (const std::string& file : files) {
    response->add_files(file);
    std::error_code error;
    const auto size = std::filesystem::file_size(file, error);
    if (!error) bytes += static_cast<int64_t>(size);
  }
  response->set_bytes_written(bytes);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::ModelChecksum(
    grpc::ServerContext* context, const v1::ModelChecksumRequest* request,
    v1::ModelChecksumResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ModelChecksum", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = Route(*context, &v1::Summon::Stub::ModelChecksum, *request,
                          response)) {
    return *routed;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  if (absl::Status appended = AppendChecksums(*registry_, **model, response);
      !appended.ok()) {
    return ToGrpcStatus(appended);
  }
  if (cluster_ == nullptr) return grpc::Status::OK;
  v1::NodeChecksumRequest checksum;
  checksum.set_model(request->model());
  checksum.set_epoch(cluster_->epoch());
  const std::vector<absl::Status> results = OnFollowers(
      *cluster_, [&](v1::Peer::Stub& stub, grpc::ClientContext& context) {
        v1::ModelChecksumResponse part;
        grpc::Status status = stub.NodeChecksum(&context, checksum, &part);
        absl::MutexLock lock(&checksum_mu_);
        for (const v1::ShardChecksum& shard : part.shards()) {
          *response->add_shards() = shard;
        }
        return status;
      });
  for (const absl::Status& status : results) {
    if (!status.ok()) return ToGrpcStatus(status);
  }
  // Rank order, whichever node answered first.
  std::stable_sort(response->mutable_shards()->begin(),
                   response->mutable_shards()->end(),
                   [](const v1::ShardChecksum& a, const v1::ShardChecksum& b) {
                     return a.rank() < b.rank();
                   });
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::DeleteModel(
    grpc::ServerContext* context, const v1::DeleteModelRequest* request,
    v1::DeleteModelResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/DeleteModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::DeleteModel, *request, response)) {
    return *routed;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Find(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  const std::vector<std::string> attached =
      trainers_->AttachedTrainers(request->model());
  if (!attached.empty() && !request->force()) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "model '", request->model(), "' has trainer '", attached.front(),
        "' attached; delete with force to detach it first")));
  }
  // R15: never under a running step, a session or a load.
  absl::StatusOr<SessionManager::ShardWriteGuard> guard =
      sessions_->LockForShardWrite(*model, "delete");
  if (!guard.ok()) return ToGrpcStatus(guard.status());
  if (!attached.empty()) {
    trainers_->Revoke(request->model(),
                      absl::StrCat("model deleted with force by '",
                                   PrincipalOf(*context), "'"));
  }
  if (absl::Status deleted = DeleteEverywhere(request->model());
      !deleted.ok()) {
    return ToGrpcStatus(deleted);
  }
  trainers_->Forget(request->model());
  // A watch names the deleted model's parameters: it goes with the model.
  if (watches_ != nullptr) {
    watches_->Forget(request->model());
    if (watch_replication_ != nullptr) {
      watch_replication_->PushModel(request->model());
    }
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
