// SummonClient::FindTensor and the shape rule of whole-tensor writes.

#include "client/lib/tensor_lookup.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace summon::client {
namespace {

// The primary parameter that `alias` is tied to; nullopt when `alias` is no
// alias of the model.
std::optional<std::string> PrimaryOf(const v1::Model& model,
                                     absl::string_view alias) {
  for (const v1::Unit& unit : model.units()) {
    for (const v1::Parameter& param : unit.params()) {
      for (const std::string& name : param.aliases()) {
        if (name == alias) return param.info().fqn();
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckWholeWrite(const v1::TensorInfo& tensor,
                             const WriteTensorParams& params,
                             int64_t element_count) {
  const std::vector<int64_t> shape(tensor.shape().begin(),
                                   tensor.shape().end());
  const std::string advice =
      ": a whole-tensor write needs the exact shape (R5); reshape the data, "
      "or write a range with element_offset";
  if (!params.shape.empty()) {
    int64_t numel = 1;
    for (const int64_t extent : params.shape) numel *= extent;
    if (numel != element_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("the data's shape ", ShapeText(params.shape), " has ",
                       numel, " elements, the data ", element_count));
    }
    if (params.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", params.tensor.fqn, "' has shape ", ShapeText(shape),
          ", the data has shape ", ShapeText(params.shape), advice));
    }
    return absl::OkStatus();
  }
  if (element_count != tensor.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", params.tensor.fqn, "' has shape ", ShapeText(shape),
                     " (", tensor.numel(), " elements), the data has shape [",
                     element_count, "]", advice));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::TensorInfo>> SummonClient::FindTensor(
    const TensorRef& ref, v1::Session* session_out) const {
  absl::StatusOr<v1::Session> session = GetSession(ref.session_id);
  if (!session.ok()) return session.status();
  if (session_out != nullptr) *session_out = *session;
  const auto& listed = ref.grad ? session->grads() : session->params();
  const auto find = [&listed](absl::string_view fqn) {
    for (const v1::TensorInfo& info : listed) {
      if (info.fqn() == fqn) return std::optional<v1::TensorInfo>(info);
    }
    return std::optional<v1::TensorInfo>();
  };
  if (std::optional<v1::TensorInfo> info = find(ref.fqn)) return info;
  absl::StatusOr<v1::Model> model = DescribeModel(session->model());
  if (!model.ok()) return model.status();
  const std::optional<std::string> primary = PrimaryOf(*model, ref.fqn);
  if (!primary) return std::optional<v1::TensorInfo>();
  return find(*primary);
}

}  // namespace summon::client
