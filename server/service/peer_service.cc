#include "server/service/peer_service.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "server/service/cluster_watch_nodes.h"
#include "server/service/cluster_watch_replicas.h"
#include "server/watch/watch_replication.h"
#include "server/service/proto_conversion.h"

namespace summon::server {
namespace {

ModelInit InitFromProto(const v1::InitMethod& init) {
  ModelInit result;
  if (init.has_seeded()) {
    result.kind = ModelInit::Kind::kSeeded;
    result.seed = init.seeded().seed();
  } else if (init.has_external()) {
    result.kind = ModelInit::Kind::kExternal;
  }
  return result;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ModelEntry>> CreateModelFromRequest(
    ModelRegistry& registry, const v1::CreateModelRequest& request) {
  std::optional<core::Strategy> strategy;
  if (request.has_strategy()) {
    absl::StatusOr<core::Strategy> parsed =
        StrategyFromProto(request.strategy(), "strategy");
    if (!parsed.ok()) return parsed.status();
    strategy = *parsed;
  }
  std::vector<int> grad_ranks;
  if (request.has_grads()) {
    grad_ranks.assign(request.grads().ranks().begin(),
                      request.grads().ranks().end());
    if (grad_ranks.empty()) {
      for (int rank = 0; rank < registry.options().topology.world_size();
           ++rank) {
        grad_ranks.push_back(rank);
      }
    }
  }
  return registry.Create(request.name(), request.layout_json(), strategy,
                         InitFromProto(request.init()), grad_ranks,
                         InitFromProto(request.grads().init()));
}

absl::Status AppendChecksums(ModelRegistry& registry, ModelEntry& model,
                             v1::ModelChecksumResponse* response) {
  absl::StatusOr<std::vector<ShardChecksums>> checksums =
      registry.Checksums(model);
  if (!checksums.ok()) return checksums.status();
  for (const ShardChecksums& sums : *checksums) {
    v1::ShardChecksum* out = response->add_shards();
    out->set_rank(sums.rank);
    out->set_unit(model.spec.units[sums.unit].fqn);
    out->set_params(sums.params);
    if (sums.grads.has_value()) out->set_grads(*sums.grads);
    out->set_generation(sums.generation);
  }
  return absl::OkStatus();
}

PeerServiceImpl::PeerServiceImpl(LocalKvStore& store, Membership* membership,
                                 ModelRegistry* registry, NodeRuntime* runtime,
                                 const auth::Authorizer* authorizer)
    : KvStoreService(store),
      authorizer_(authorizer),
      membership_(membership),
      registry_(registry),
      runtime_(runtime) {
  const int node_read_version = v1::NodeReadVersionRequest::descriptor()
                                    ->file()
                                    ->pool()
                                    ->FindServiceByName("summon.v1.Peer")
                                    ->FindMethodByName("NodeReadVersion")
                                    ->index();
  MarkMethodStreamed(
      node_read_version,
      new grpc::internal::SplitServerStreamingHandler<
          v1::NodeReadVersionRequest, grpc::ByteBuffer>(
          [this](grpc::ServerContext* context, NodeReadVersionStream* stream) {
            return StreamNodeReadVersion(context, stream);
          }));
}

grpc::Status PeerServiceImpl::StoreSet(grpc::ServerContext* context,
                                       const v1::StoreSetRequest* request,
                                       v1::StoreSetResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/StoreSet", *request);
      !denied.ok()) {
    return denied;
  }
  return KvStoreService::StoreSet(context, request, response);
}

grpc::Status PeerServiceImpl::StoreGet(grpc::ServerContext* context,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/StoreGet", *request);
      !denied.ok()) {
    return denied;
  }
  return KvStoreService::StoreGet(context, request, response);
}

grpc::Status PeerServiceImpl::StoreWait(grpc::ServerContext* context,
                                        const v1::StoreWaitRequest* request,
                                        v1::StoreWaitResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/StoreWait", *request);
      !denied.ok()) {
    return denied;
  }
  return KvStoreService::StoreWait(context, request, response);
}

grpc::Status PeerServiceImpl::Fence(uint64_t epoch) const {
  const uint64_t current = membership_->epoch();
  if (epoch == current && epoch != 0) return grpc::Status::OK;
  if (epoch == 0) {
    // Sent by a node in no epoch (a leader that just failed and has not
    // re-formed): two such nodes would otherwise take each other's
    // operations, numbered in no common order.
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "node ", membership_->node_rank(),
        " is fenced: the operation carries no cluster epoch, the node is in "
        "epoch ",
        absl::Hex(current))));
  }
  return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
      "node ", membership_->node_rank(),
      " is fenced: the operation is from "
      "cluster epoch ",
      absl::Hex(epoch), ", the node is in epoch ", absl::Hex(current))));
}

grpc::Status PeerServiceImpl::Join(grpc::ServerContext* context,
                                   const v1::JoinRequest* request,
                                   v1::JoinResponse* response) {
  if (grpc::Status denied = Allow(*context, "/summon.v1.Peer/Join", *request);
      !denied.ok()) {
    return denied;
  }
  absl::StatusOr<v1::JoinResponse> roster = membership_->HandleJoin(*request);
  if (!roster.ok()) return ToGrpcStatus(roster.status());
  *response = *std::move(roster);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/Heartbeat", *request);
      !denied.ok()) {
    return denied;
  }
  absl::StatusOr<v1::HeartbeatResponse> answer =
      membership_->HandleHeartbeat(*request);
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  *response = *std::move(answer);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeGather(grpc::ServerContext* context,
                                         const v1::NodeGatherRequest* request,
                                         v1::NodeGatherResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeGather", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  absl::StatusOr<SessionOptions> options =
      SessionOptionsFromProto(request->scope());
  if (!options.ok()) return ToGrpcStatus(options.status());
  GatherOp op;
  op.sequence = request->sequence();
  op.gather_id = request->gather_id();
  op.model = request->model();
  op.scope = options->scope;
  op.rank0_only = request->rank0_only();
  op.home_rank = request->home_rank();
  op.grads = request->grads();
  op.offload_to_cpu = options->offload_to_cpu;
  op.stale_nodes.assign(request->stale_nodes().begin(),
                        request->stale_nodes().end());
  return ToGrpcStatus(runtime_->Gather(op));
}

grpc::Status PeerServiceImpl::NodeWrite(grpc::ServerContext* context,
                                        const v1::NodeWriteRequest* request,
                                        v1::NodeWriteResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeWrite", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  WriteOp op;
  op.gather_id = request->gather_id();
  op.session_id = request->session_id();
  op.private_copy = request->private_copy();
  op.tensor = request->tensor();
  op.grad = request->grad();
  op.element_offset = request->element_offset();
  op.bytes = request->data();
  return ToGrpcStatus(runtime_->Write(op));
}

grpc::Status PeerServiceImpl::NodeRead(
    grpc::ServerContext* context, const v1::NodeReadRequest* request,
    grpc::ServerWriter<v1::NodeReadResponse>* writer) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeRead", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  absl::StatusOr<core::DType> dtype = DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  return ToGrpcStatus(runtime_->Read(
      request->gather_id(), request->session_id(), request->tensor(),
      request->grad(), *dtype, request->element_offset(),
      request->element_count(), request->chunk_bytes(),
      [&](int64_t offset, absl::string_view bytes,
          const std::shared_ptr<const void>& /*pin*/) {
        v1::NodeReadResponse chunk;
        chunk.set_element_offset(offset);
        chunk.set_data(bytes.data(), bytes.size());
        return !context->IsCancelled() && writer->Write(chunk);
      }));
}

grpc::Status PeerServiceImpl::NodeStats(grpc::ServerContext* context,
                                        const v1::NodeStatsRequest* request,
                                        v1::NodeStatsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeStats", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  absl::StatusOr<std::vector<core::TensorStatistics>> stats =
      runtime_->Stats(request->gather_id(), request->session_id(),
                      {request->tensors().begin(), request->tensors().end()},
                      request->grad(), request->bins());
  if (!stats.ok()) return ToGrpcStatus(stats.status());
  for (const core::TensorStatistics& numbers : *stats) {
    TensorStatisticsToProto(core::SessionTensor{}, numbers,
                            response->add_stats());
  }
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeWatchPartials(
    grpc::ServerContext* context, const v1::NodeWatchPartialsRequest* request,
    v1::NodeWatchPartialsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeWatchPartials", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  const WatchPartialsRequest watch_request =
      WatchPartialsRequestFromProto(*request);
  if (absl::Status valid = CheckWatchPartialsRequest(watch_request);
      !valid.ok()) {
    return ToGrpcStatus(valid);
  }
  absl::StatusOr<std::vector<core::WatchPartial>> partials =
      ComputeNodeWatchPartials(**model, watch_request);
  if (!partials.ok()) return ToGrpcStatus(partials.status());
  for (const core::WatchPartial& partial : *partials) {
    WatchPartialToProto(partial, response->add_partials());
  }
  return grpc::Status::OK;
}

namespace {

grpc::Status NoWatches() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon keeps no watches");
}

}  // namespace

grpc::Status PeerServiceImpl::NodeWatchVersions(
    grpc::ServerContext* context, const v1::NodeWatchVersionsRequest* request,
    v1::NodeWatchVersionsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeWatchVersions", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (watches_ == nullptr) return NoWatches();
  for (const WatchVersion& version : watches_->Versions()) {
    WatchVersionToProto(version, response->add_watches());
  }
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeWatchFetch(
    grpc::ServerContext* context, const v1::NodeWatchFetchRequest* request,
    grpc::ServerWriter<v1::WatchChunk>* writer) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeWatchFetch", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (watches_ == nullptr) return NoWatches();
  const std::vector<WatchChunk> chunks =
      watches_->Export(request->model(), WatchReplication::kChunkBytes);
  if (chunks.empty()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("this node holds no watch of model '",
                                     request->model(), "'"));
  }
  for (const WatchChunk& chunk : chunks) {
    v1::WatchChunk out;
    WatchChunkToProto(chunk, &out);
    if (!writer->Write(out)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the leader went away");
    }
  }
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeWatchApply(
    grpc::ServerContext* context, const v1::NodeWatchApplyRequest* request,
    v1::NodeWatchApplyResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeWatchApply", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (watches_ == nullptr) return NoWatches();
  absl::StatusOr<WatchChunk> chunk = WatchChunkFromProto(request->chunk());
  if (!chunk.ok()) return ToGrpcStatus(chunk.status());
  return ToGrpcStatus(watches_->Apply(*chunk));
}

grpc::Status PeerServiceImpl::NodePrepare(grpc::ServerContext* context,
                                          const v1::NodePrepareRequest* request,
                                          v1::NodePrepareResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodePrepare", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  PrepareOp op;
  op.sequence = request->sequence();
  op.gather_id = request->gather_id();
  op.session_id = request->session_id();
  op.expected_generations = {request->expected_generations().begin(),
                             request->expected_generations().end()};
  op.target_generations = {request->target_generations().begin(),
                           request->target_generations().end()};
  op.force = request->force();
  absl::StatusOr<int64_t> staged = runtime_->Prepare(op);
  if (!staged.ok()) return ToGrpcStatus(staged.status());
  response->set_staged_bytes(*staged);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeCommit(grpc::ServerContext* context,
                                         const v1::NodeCommitRequest* request,
                                         v1::NodeCommitResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeCommit", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  CommitOp op;
  op.sequence = request->sequence();
  op.model = request->model();
  op.gather_id = request->gather_id();
  op.session_id = request->session_id();
  op.target_generations = {request->target_generations().begin(),
                           request->target_generations().end()};
  return ToGrpcStatus(runtime_->Commit(op));
}

grpc::Status PeerServiceImpl::NodeSetGenerations(
    grpc::ServerContext* context, const v1::NodeSetGenerationsRequest* request,
    v1::NodeSetGenerationsResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeSetGenerations", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  GenerationsOp op;
  op.sequence = request->sequence();
  op.model = request->model();
  op.generations = {request->generations().begin(),
                    request->generations().end()};
  op.initialized = request->initialized();
  return ToGrpcStatus(runtime_->SetGenerations(op));
}

grpc::Status PeerServiceImpl::NodeAbort(grpc::ServerContext* context,
                                        const v1::NodeAbortRequest* request,
                                        v1::NodeAbortResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeAbort", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  runtime_->Abort(request->session_id());
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeRelease(grpc::ServerContext* context,
                                          const v1::NodeReleaseRequest* request,
                                          v1::NodeReleaseResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeRelease", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (!request->session_id().empty()) {
    runtime_->ReleaseSession(request->session_id());
  }
  if (!request->gather_id().empty()) runtime_->Release(request->gather_id());
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeCreateModel(
    grpc::ServerContext* context, const v1::NodeCreateModelRequest* request,
    v1::NodeModelResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeCreateModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  return ToGrpcStatus(
      CreateModelFromRequest(*registry_, request->create()).status());
}

grpc::Status PeerServiceImpl::NodeLoadModel(
    grpc::ServerContext* context, const v1::NodeLoadModelRequest* request,
    v1::NodeModelResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeLoadModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (absl::StatusOr<std::string> here =
          checkpoint_roots_.Resolve(request->path());
      !here.ok()) {
    return ToGrpcStatus(here.status());
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->GetRecreatingShards(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  absl::StatusOr<int64_t> bytes =
      registry_->LoadCheckpoint(**model, request->path(), request->convert());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  response->set_bytes(*bytes);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeChecksum(
    grpc::ServerContext* context, const v1::NodeChecksumRequest* request,
    v1::ModelChecksumResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeChecksum", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  return ToGrpcStatus(AppendChecksums(*registry_, **model, response));
}

grpc::Status PeerServiceImpl::NodeDeleteModel(
    grpc::ServerContext* context, const v1::NodeDeleteModelRequest* request,
    v1::NodeModelResponse*) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeDeleteModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  return ToGrpcStatus(registry_->Remove(request->model()));
}

grpc::Status PeerServiceImpl::NodeSaveModel(
    grpc::ServerContext* context, const v1::NodeSaveModelRequest* request,
    v1::NodeModelResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeSaveModel", *request);
      !denied.ok()) {
    return denied;
  }
  if (grpc::Status fenced = Fence(request->epoch()); !fenced.ok()) {
    return fenced;
  }
  if (absl::StatusOr<std::string> here =
          checkpoint_roots_.Resolve(request->path());
      !here.ok()) {
    return ToGrpcStatus(here.status());
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      registry_->Get(request->model());
  if (!model.ok()) return ToGrpcStatus(model.status());
  absl::StatusOr<CheckpointFiles> plan =
      registry_->PlanSave(**model, request->path(), request->max_file_bytes());
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  absl::StatusOr<int64_t> bytes = registry_->WriteSaveRanges(**model, *plan);
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  response->set_bytes(*bytes);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::NodeHealth(grpc::ServerContext* context,
                                         const v1::NodeHealthRequest* request,
                                         v1::NodeHealthResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Peer/NodeHealth", *request);
      !denied.ok()) {
    return denied;
  }
  for (const std::string& name : request->models()) {
    v1::NodeModelHealth* health = response->add_models();
    health->set_model(name);
    absl::StatusOr<std::shared_ptr<ModelEntry>> model = registry_->Find(name);
    if (!model.ok()) {
      // Its records went with this node's data dir: its ranks have no
      // shards, and only a delete and a new create bring them back.
      health->set_state(v1::MODEL_STATE_MISSING_SHARDS);
      health->set_detail(absl::StrCat(
          "model '", name,
          "' is not recorded on this node; recover with `summonctl model "
          "delete ",
          name, "` and create it again"));
      continue;
    }
    std::string detail;
    health->set_state(ModelStateToProto(HealthOf(**model, &detail)));
    health->set_detail(std::move(detail));
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
