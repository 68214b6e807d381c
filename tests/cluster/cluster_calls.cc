#include "tests/cluster/cluster_calls.h"

#include <utility>

#include "gtest/gtest.h"
#include "tests/cluster/cluster_values.h"

namespace summon::tests {

v1::Model CreateSeeded(const client::SummonClient& node,
                       const std::string& name, const std::string& layout_json,
                       v1::ShardingStrategy strategy,
                       std::optional<std::vector<int32_t>> grad_ranks) {
  client::CreateModelParams params;
  params.name = name;
  params.layout_json = layout_json;
  params.strategy = strategy;
  params.init.mutable_seeded()->set_seed(kSeed);
  params.grad_ranks = std::move(grad_ranks);
  if (params.grad_ranks.has_value()) {
    params.grad_init.mutable_seeded()->set_seed(kGradSeed);
  }
  absl::StatusOr<v1::Model> model = node.CreateModel(params);
  EXPECT_TRUE(model.ok()) << "CreateModel " << name << ": " << model.status();
  return model.ok() ? *model : v1::Model();
}

v1::Session OpenOk(const client::SummonClient& node, const std::string& model,
                   const v1::SessionOptions& options) {
  absl::StatusOr<v1::Session> session = node.OpenSession(model, options);
  EXPECT_TRUE(session.ok())
      << "OpenSession " << model << " " << options.ShortDebugString() << ": "
      << session.status();
  return session.ok() ? *session : v1::Session();
}

std::string ReadOk(const client::SummonClient& node, const std::string& session,
                   const std::string& fqn, bool grad, v1::DType dtype) {
  client::ReadTensorParams params;
  params.tensor = {session, fqn, grad};
  params.dtype = dtype;
  absl::StatusOr<client::TensorData> data = node.ReadTensor(params);
  EXPECT_TRUE(data.ok()) << "ReadTensor " << fqn << (grad ? " (grad)" : "")
                         << ": " << data.status();
  return data.ok() ? data->data : "";
}

void WriteOk(const client::SummonClient& node, const std::string& session,
             const std::string& fqn, const std::string& bytes, v1::DType dtype,
             bool grad) {
  client::WriteTensorParams params;
  params.tensor = {session, fqn, grad};
  params.dtype = dtype;
  absl::StatusOr<v1::WriteTensorResponse> written =
      node.WriteTensor(params, bytes);
  EXPECT_TRUE(written.ok()) << "WriteTensor " << fqn << (grad ? " (grad)" : "")
                            << ": " << written.status();
}

v1::CloseSessionResponse CloseOk(const client::SummonClient& node,
                                 const std::string& session) {
  absl::StatusOr<v1::CloseSessionResponse> closed = node.CloseSession(session);
  EXPECT_TRUE(closed.ok()) << "CloseSession " << session << ": "
                           << closed.status();
  return closed.ok() ? *closed : v1::CloseSessionResponse();
}

v1::ModelChecksumResponse ChecksumOk(const client::SummonClient& node,
                                     const std::string& model) {
  absl::StatusOr<v1::ModelChecksumResponse> sums = node.ModelChecksum(model);
  EXPECT_TRUE(sums.ok()) << "ModelChecksum " << model << ": " << sums.status();
  return sums.ok() ? *sums : v1::ModelChecksumResponse();
}

}  // namespace summon::tests
