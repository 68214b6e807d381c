// The leader's model operations on every node: create, save, load and
// delete applied here and then on each follower, all or nothing where it
// can be, and the model's health gathered from every node
// (SummonServiceImpl's second source file).

#include <filesystem>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/checkpoint/checkpoint.h"
#include "server/runtime/fault_points.h"
#include "server/service/peer_service.h"
#include "server/service/summon_service.h"

namespace summon::server {
namespace {

// A health answer is a few strings per model; a follower slower than this
// is stuck, and ListModels must not hang with it.
constexpr absl::Duration kHealthTimeout = absl::Seconds(5);

// Which of two states a model shows when nodes disagree: the one asking
// more of the operator.
int Severity(v1::ModelState state) {
  switch (state) {
    case v1::MODEL_STATE_MISSING_SHARDS:
      return 3;
    case v1::MODEL_STATE_DEGRADED:
      return 2;
    case v1::MODEL_STATE_AWAITING_INIT:
      return 1;
    default:
      return 0;
  }
}

// A follower that may not open the leader's checkpoint path: every node
// reads and writes its own ranks' ranges of the same files, so the path
// must lie on every node beneath its checkpoint roots. The usual cause is
// each node's default root, <data-dir>/checkpoints, which differs per node.
absl::Status OnEveryNode(absl::Status follower) {
  if (follower.code() != absl::StatusCode::kPermissionDenied) return follower;
  return absl::FailedPreconditionError(absl::StrCat(
      follower.message(),
      ". Every node of a cluster writes and reads the same checkpoint files: "
      "give every node the same --checkpoint-root, a directory all of them "
      "see at that path (shared storage; on one host any directory), not "
      "each node's default <data-dir>/checkpoints"));
}

// Folds node `node`'s answer into `states`: each model keeps the worse
// state, a follower's detail prefixed "node N: ".
void FoldNodeHealth(
    int node, const v1::NodeHealthResponse& answer,
    std::map<std::string, std::pair<v1::ModelState, std::string>>* states) {
  for (const v1::NodeModelHealth& health : answer.models()) {
    auto it = states->find(health.model());
    if (it == states->end() ||
        Severity(health.state()) <= Severity(it->second.first)) {
      continue;
    }
    it->second = {health.state(),
                  absl::StrCat("node ", node, ": ", health.detail())};
  }
}

}  // namespace

absl::StatusOr<uint64_t> SummonServiceImpl::ActingEpoch() const {
  FaultPoint("model.before_apply");
  if (cluster_ == nullptr) return 0;
  const uint64_t epoch = cluster_->epoch();
  if (absl::Status leading = cluster_->CheckLeading();
      !leading.ok() && !FenceBroken("model.lease")) {
    return leading;
  }
  return epoch;
}

absl::Status SummonServiceImpl::CreateEverywhere(
    const v1::CreateModelRequest& request) {
  absl::StatusOr<uint64_t> epoch = ActingEpoch();
  if (!epoch.ok()) return epoch.status();
  absl::StatusOr<std::shared_ptr<ModelEntry>> model =
      CreateModelFromRequest(*registry_, request);
  if (!model.ok() || cluster_ == nullptr) return model.status();
  v1::NodeCreateModelRequest create;
  *create.mutable_create() = request;
  create.set_epoch(*epoch);
  const std::vector<absl::Status> results = OnFollowers(
      *cluster_, [&](v1::Peer::Stub& stub, grpc::ClientContext& context) {
        v1::NodeModelResponse response;
        return stub.NodeCreateModel(&context, create, &response);
      });
  for (const absl::Status& status : results) {
    if (status.ok()) continue;
    // All or nothing: undo the model wherever it was made.
    DeleteEverywhere(request.name()).IgnoreError();
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SummonServiceImpl::SaveEverywhere(
    ModelEntry& model, const std::string& path, int64_t max_file_bytes) {
  // The leader creates the files, every node writes its own ranks' ranges
  // (never a full copy anywhere), the leader commits once every byte is in.
  absl::MutexLock save_lock(&save_mu_);
  absl::StatusOr<uint64_t> epoch = ActingEpoch();
  if (!epoch.ok()) return epoch.status();
  absl::StatusOr<CheckpointFiles> plan =
      registry_->PlanSave(model, path, max_file_bytes);
  if (!plan.ok()) return plan.status();
  if (absl::Status status = CreateCheckpointFiles(*plan); !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> local = registry_->WriteSaveRanges(model, *plan);
  absl::Status status = local.status();
  int64_t total = local.ok() ? *local : 0;
  v1::NodeSaveModelRequest save;
  save.set_model(model.name);
  save.set_path(path);
  save.set_max_file_bytes(max_file_bytes);
  save.set_epoch(*epoch);
  const std::vector<absl::Status> results = OnFollowers(
      *cluster_, [&](v1::Peer::Stub& stub, grpc::ClientContext& context) {
        v1::NodeModelResponse response;
        grpc::Status result = stub.NodeSaveModel(&context, save, &response);
        absl::MutexLock lock(&checksum_mu_);
        total += response.bytes();
        return result;
      });
  for (const absl::Status& result : results) {
    if (status.ok() && !result.ok()) status = OnEveryNode(result);
  }
  if (status.ok() && total != plan->tensor_bytes) {
    status = absl::InternalError(absl::StrCat("the nodes wrote ", total, " of ",
                                              plan->tensor_bytes,
                                              " checkpoint bytes"));
  }
  if (!status.ok()) {
    AbandonCheckpointFiles(*plan);
    return status;
  }
  absl::StatusOr<SavedCheckpoint> saved = CommitCheckpointFiles(*plan);
  if (!saved.ok()) return saved.status();
  return saved->files;
}

absl::StatusOr<int64_t> SummonServiceImpl::LoadEverywhere(
    ModelEntry& model, const std::string& path, bool convert) {
  absl::StatusOr<uint64_t> epoch = ActingEpoch();
  if (!epoch.ok()) return epoch.status();
  absl::StatusOr<int64_t> bytes =
      registry_->LoadCheckpoint(model, path, convert);
  if (!bytes.ok() || cluster_ == nullptr) return bytes;
  v1::NodeLoadModelRequest load;
  load.set_model(model.name);
  load.set_path(std::filesystem::absolute(path).string());
  load.set_convert(convert);
  load.set_epoch(*epoch);
  const std::vector<absl::Status> results = OnFollowers(
      *cluster_, [&](v1::Peer::Stub& stub, grpc::ClientContext& context) {
        v1::NodeModelResponse response;
        return stub.NodeLoadModel(&context, load, &response);
      });
  for (const absl::Status& status : results) {
    if (!status.ok()) return OnEveryNode(status);
  }
  return *bytes;
}

absl::Status SummonServiceImpl::DeleteEverywhere(const std::string& model) {
  absl::StatusOr<uint64_t> epoch = ActingEpoch();
  if (!epoch.ok()) return epoch.status();
  if (absl::Status status = registry_->Remove(model); !status.ok()) {
    return status;
  }
  if (cluster_ == nullptr) return absl::OkStatus();
  v1::NodeDeleteModelRequest remove;
  remove.set_model(model);
  remove.set_epoch(*epoch);
  for (const absl::Status& status : OnFollowers(
           *cluster_, [&](v1::Peer::Stub&stub, grpc::ClientContext&context) {
             v1::NodeModelResponse response;
             return stub.NodeDeleteModel(&context, remove, &response);
           })) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status SummonServiceImpl::FoldClusterHealth(
    std::map<std::string, std::pair<v1::ModelState, std::string>>* states) {
  if (cluster_ == nullptr || states->empty()) return absl::OkStatus();
  v1::NodeHealthRequest request;
  for (const auto& [name, unused] : *states) request.add_models(name);
  // Each follower writes only its own slot.
  std::vector<v1::NodeHealthResponse> answers(cluster_->size());
  const std::vector<absl::Status> results = OnFollowers(
      *cluster_,
      [&](int node, v1::Peer::Stub& stub, grpc::ClientContext& context) {
        context.set_deadline(absl::ToChronoTime(absl::Now() + kHealthTimeout));
        return stub.NodeHealth(&context, request, &answers[node]);
      });
  // Nodes outside the epoch are not asked: the plans leave them out.
  const std::set<int> absent = cluster_->AbsentNodes();
  for (int node = 0; node < cluster_->size(); ++node) {
    if (!results[node].ok() && absent.count(node) == 0) return results[node];
  }
  // Node order, and a tie keeps the lower node: the same detail whichever
  // node answers first.
  for (int node = 0; node < cluster_->size(); ++node) {
    if (node == cluster_->node_rank() || absent.count(node) > 0) continue;
    FoldNodeHealth(node, answers[node], states);
  }
  return absl::OkStatus();
}

std::vector<int> SummonServiceImpl::FoldReachableHealth(
    std::map<std::string, std::pair<v1::ModelState, std::string>>* states) {
  if (cluster_ == nullptr) return {};
  v1::NodeHealthRequest request;
  for (const auto& [name, unused] : *states) request.add_models(name);
  const int self = cluster_->node_rank();
  std::vector<v1::NodeHealthResponse> answers(cluster_->size());
  std::vector<grpc::Status> results(cluster_->size());
  std::vector<std::thread> threads;
  for (int node = 0; node < cluster_->size(); ++node) {
    if (node == self) continue;
    threads.emplace_back([&, node] {
      auto stub = v1::Peer::NewStub(cluster_->ChannelTo(node));
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + kHealthTimeout));
      results[node] = stub->NodeHealth(&context, request, &answers[node]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<int> down;
  for (int node = 0; node < cluster_->size(); ++node) {
    if (node == self) continue;
    if (!results[node].ok()) {
      down.push_back(node);
      continue;
    }
    FoldNodeHealth(node, answers[node], states);
  }
  return down;
}

absl::Status SummonServiceImpl::RefuseMissingOnFollowers(
    const std::string& model) {
  if (!registry_->Find(model).ok()) return absl::OkStatus();
  std::map<std::string, std::pair<v1::ModelState, std::string>> states = {
      {model, {v1::MODEL_STATE_READY, ""}}};
  if (absl::Status status = FoldClusterHealth(&states); !status.ok()) {
    return status;
  }
  const auto& [state, detail] = states[model];
  if (state != v1::MODEL_STATE_MISSING_SHARDS) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("model '", model, "' is MISSING_SHARDS: ", detail));
}

}  // namespace summon::server
