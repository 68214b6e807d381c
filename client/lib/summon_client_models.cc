// SummonClient: the model calls (create, load, save, checksum, delete)
// and the watches on a model.
#include <optional>
#include <string>

#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"

namespace summon::client {

absl::StatusOr<v1::ListModelsResponse> SummonClient::ListModels() const {
  return UnaryThroughElection(&v1::Summon::Stub::ListModels,
                              v1::ListModelsRequest());
}

absl::StatusOr<v1::Model> SummonClient::DescribeModel(
    const std::string& model) const {
  v1::DescribeModelRequest request;
  request.set_model(model);
  return UnaryThroughElection(&v1::Summon::Stub::DescribeModel, request);
}

absl::StatusOr<v1::Model> SummonClient::CreateModel(
    const CreateModelParams& params) const {
  v1::CreateModelRequest request;
  request.set_name(params.name);
  request.set_layout_json(params.layout_json);
  if (params.strategy) request.set_strategy(*params.strategy);
  *request.mutable_init() = params.init;
  if (params.grad_ranks) {
    // An empty but present GradientShards message means "every rank".
    v1::GradientShards& grads = *request.mutable_grads();
    grads.mutable_ranks()->Add(params.grad_ranks->begin(),
                               params.grad_ranks->end());
    *grads.mutable_init() = params.grad_init;
  } else if (params.grad_init.method_case() != v1::InitMethod::METHOD_NOT_SET) {
    return absl::InvalidArgumentError(
        "CreateModel: grad_init without grad_ranks (a model without "
        "gradients has none to fill)");
  }
  return Unary(*summon_, &v1::Summon::Stub::CreateModel, NewContext(), request);
}

absl::StatusOr<v1::LoadModelResponse> SummonClient::LoadModel(
    const std::string& model, const std::string& path,
    const std::optional<v1::CheckpointWrapRule>& create,
    const std::string& skip, v1::DType dtype) const {
  v1::LoadModelRequest request;
  request.set_model(model);
  request.set_path(path);
  if (create) *request.mutable_create() = *create;
  request.set_skip(skip);
  request.set_dtype(dtype);
  return Unary(*summon_, &v1::Summon::Stub::LoadModel, NewContext(), request);
}

absl::StatusOr<v1::SaveModelResponse> SummonClient::SaveModel(
    const std::string& model, const std::string& path, uint64_t max_file_bytes,
    bool overwrite) const {
  v1::SaveModelRequest request;
  request.set_model(model);
  request.set_path(path);
  request.set_max_file_bytes(max_file_bytes);
  request.set_overwrite(overwrite);
  return Unary(*summon_, &v1::Summon::Stub::SaveModel, NewContext(), request);
}

absl::StatusOr<v1::ModelChecksumResponse> SummonClient::ModelChecksum(
    const std::string& model) const {
  v1::ModelChecksumRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::ModelChecksum, NewContext(),
               request);
}

absl::StatusOr<v1::DeleteModelResponse> SummonClient::DeleteModel(
    const std::string& model, bool force) const {
  v1::DeleteModelRequest request;
  request.set_model(model);
  request.set_force(force);
  return Unary(*summon_, &v1::Summon::Stub::DeleteModel, NewContext(), request);
}

absl::StatusOr<v1::Watch> SummonClient::AddWatch(
    const v1::AddWatchRequest& request) const {
  return Unary(*summon_, &v1::Summon::Stub::AddWatch, NewContext(), request);
}

absl::StatusOr<v1::ListWatchesResponse> SummonClient::ListWatches() const {
  return Unary(*summon_, &v1::Summon::Stub::ListWatches, NewContext(),
               v1::ListWatchesRequest());
}

absl::StatusOr<v1::RemoveWatchResponse> SummonClient::RemoveWatch(
    const std::string& model) const {
  v1::RemoveWatchRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::RemoveWatch, NewContext(),
               request);
}

absl::StatusOr<v1::ShowWatchResponse> SummonClient::ShowWatch(
    const v1::ShowWatchRequest& request) const {
  return Unary(*summon_, &v1::Summon::Stub::ShowWatch, NewContext(), request);
}

absl::StatusOr<v1::ClusterStatus> SummonClient::GetClusterStatus() const {
  return Unary(*summon_, &v1::Summon::Stub::GetClusterStatus, NewContext(),
               v1::GetClusterStatusRequest());
}

}  // namespace summon::client
