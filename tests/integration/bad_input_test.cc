// Bad input for every RPC of Summon and Trainer: unknown ids, empty and huge
// fields, unset or unknown enums, out-of-range offsets, write streams in the
// wrong order or truncated. Each gets its documented status, a refused write
// applies nothing, and afterwards the daemon still serves normally.

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/bad_input_fixture.h"

namespace summon::tests {
namespace {

TEST_F(BadInputTest, ModelRpcsRefuseBadInputWithClearCodes) {
  auto describe = [&](const std::string& name) {
    pb::DescribeModelRequest request;
    request.set_model(name);
    return Unary<pb::DescribeModelRequest, pb::Model>(
        &pb::Summon::Stub::DescribeModel, request);
  };
  auto create = [&](const std::string& name, const std::string& layout,
                    const std::function<void(pb::CreateModelRequest*)>& edit =
                        nullptr) {
    pb::CreateModelRequest request;
    request.set_name(name);
    request.set_layout_json(layout);
    if (edit) edit(&request);
    return Unary<pb::CreateModelRequest, pb::Model>(
        &pb::Summon::Stub::CreateModel, request);
  };
  auto load = [&](const std::string& model, const std::string& path,
                  bool with_create = false) {
    pb::LoadModelRequest request;
    request.set_model(model);
    request.set_path(path);
    if (with_create)
      request.mutable_create()->set_strategy(
          static_cast<pb::ShardingStrategy>(42));
    return Unary<pb::LoadModelRequest, pb::LoadModelResponse>(
        &pb::Summon::Stub::LoadModel, request);
  };
  auto save = [&](const std::string& model, const std::string& path,
                  uint64_t max_file_bytes = 0) {
    pb::SaveModelRequest request;
    request.set_model(model);
    request.set_path(path);
    request.set_max_file_bytes(max_file_bytes);
    return Unary<pb::SaveModelRequest, pb::SaveModelResponse>(
        &pb::Summon::Stub::SaveModel, request);
  };
  pb::ModelChecksumRequest checksum;
  checksum.set_model("ghost");
  pb::ListSessionsRequest list;
  list.set_model("ghost");
  pb::DeleteModelRequest delete_ghost;
  delete_ghost.set_model("ghost");
  pb::DeleteModelRequest delete_busy;
  delete_busy.set_model("m");
  {
    std::ofstream garbage(data_dir_ + "/checkpoints/garbage.safetensors");
    garbage << "\xff\xff\xff\xff\xff\xff\xff\x7fnot a header";
  }
  // Loading needs a model without open sessions.
  CreateSeeded("idle");
  const std::string int_layout = R"({"units": [{"fqn": "", "params": [
      {"fqn": "ids", "shape": [4], "dtype": "int64"}]}]})";

  ExpectAll({
      {"describe unknown", StatusCode::NOT_FOUND, describe("ghost")},
      {"describe empty", StatusCode::NOT_FOUND, describe("")},
      {"create empty name", StatusCode::INVALID_ARGUMENT,
       create("", kBlocksLayout)},
      {"create 129-character name", StatusCode::INVALID_ARGUMENT,
       create(std::string(129, 'n'), kBlocksLayout)},
      {"create name with slash", StatusCode::INVALID_ARGUMENT,
       create("a/b", kBlocksLayout)},
      {"create name ..", StatusCode::INVALID_ARGUMENT,
       create("..", kBlocksLayout)},
      {"create taken name", StatusCode::ALREADY_EXISTS,
       create("m", kBlocksLayout)},
      {"create empty layout", StatusCode::INVALID_ARGUMENT, create("x", "")},
      {"create malformed layout", StatusCode::INVALID_ARGUMENT,
       create("x", "{\"units\": [")},
      {"create 3 MB layout", StatusCode::INVALID_ARGUMENT,
       create("x", std::string(3 << 20, '{'))},
      {"create 10 MB layout", StatusCode::RESOURCE_EXHAUSTED,
       create("x", std::string(10 << 20, ' '))},
      {"create int64 parameter (R14)", StatusCode::INVALID_ARGUMENT,
       create("x", int_layout)},
      {"create strategy UNSPECIFIED", StatusCode::INVALID_ARGUMENT,
       create("x", kBlocksLayout,
              [](pb::CreateModelRequest* r) {
                r->set_strategy(pb::SHARDING_STRATEGY_UNSPECIFIED);
              })},
      {"create strategy 42", StatusCode::INVALID_ARGUMENT,
       create("x", kBlocksLayout,
              [](pb::CreateModelRequest* r) {
                r->set_strategy(static_cast<pb::ShardingStrategy>(42));
              })},
      {"create grad rank 4", StatusCode::INVALID_ARGUMENT,
       create("x", kBlocksLayout,
              [](pb::CreateModelRequest* r) {
                r->mutable_grads()->add_ranks(4);
              })},
      {"create grad rank -1", StatusCode::INVALID_ARGUMENT,
       create("x", kBlocksLayout,
              [](pb::CreateModelRequest* r) {
                r->mutable_grads()->add_ranks(-1);
              })},
      {"load empty path", StatusCode::INVALID_ARGUMENT, load("idle", "")},
      {"load missing file", StatusCode::NOT_FOUND,
       load("idle", "missing.safetensors")},
      {"load malformed file", StatusCode::INVALID_ARGUMENT,
       load("idle", "garbage.safetensors")},
      {"load into unknown model", StatusCode::NOT_FOUND,
       load("ghost", "garbage.safetensors")},
      {"load create with strategy 42", StatusCode::INVALID_ARGUMENT,
       load("y", "garbage.safetensors", true)},
      {"save unknown model", StatusCode::NOT_FOUND,
       save("ghost", "x.safetensors")},
      {"save empty path", StatusCode::INVALID_ARGUMENT, save("m", "")},
      {"save max_file_bytes 2^64-1", StatusCode::INVALID_ARGUMENT,
       save("m", "dir", ~uint64_t{0})},
      {"checksum unknown", StatusCode::NOT_FOUND,
       Unary<pb::ModelChecksumRequest, pb::ModelChecksumResponse>(
           &pb::Summon::Stub::ModelChecksum, checksum)},
      {"delete unknown model", StatusCode::NOT_FOUND,
       Unary<pb::DeleteModelRequest, pb::DeleteModelResponse>(
           &pb::Summon::Stub::DeleteModel, delete_ghost)},
      {"delete model with open sessions", StatusCode::FAILED_PRECONDITION,
       Unary<pb::DeleteModelRequest, pb::DeleteModelResponse>(
           &pb::Summon::Stub::DeleteModel, delete_busy)},
      {"list sessions of unknown model", StatusCode::NOT_FOUND,
       Unary<pb::ListSessionsRequest, pb::ListSessionsResponse>(
           &pb::Summon::Stub::ListSessions, list)},
  });
  // Nothing was created by the refused calls.
  pb::ListModelsResponse models;
  grpc::ClientContext context;
  ASSERT_TRUE(summon_->ListModels(&context, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(0).name(), "idle");
  EXPECT_EQ(models.models(1).name(), "m");
}

TEST_F(BadInputTest, SessionRpcsRefuseBadInputWithClearCodes) {
  auto options = [](const std::function<void(pb::SessionOptions*)>& edit) {
    pb::SessionOptions options = ReadOnly();
    edit(&options);
    return options;
  };
  auto get = [&](const std::string& id) {
    pb::GetSessionRequest request;
    request.set_session_id(id);
    return Unary<pb::GetSessionRequest, pb::Session>(
        &pb::Summon::Stub::GetSession, request);
  };
  auto renew = [&](const std::string& id, uint32_t lease) {
    pb::RenewSessionRequest request;
    request.set_session_id(id);
    request.set_lease_seconds(lease);
    return Unary<pb::RenewSessionRequest, pb::Session>(
        &pb::Summon::Stub::RenewSession, request);
  };
  auto close = [&](const std::string& id) {
    pb::CloseSessionRequest request;
    request.set_session_id(id);
    return Unary<pb::CloseSessionRequest, pb::CloseSessionResponse>(
        &pb::Summon::Stub::CloseSession, request);
  };
  ExpectAll({
      {"open unknown model", StatusCode::NOT_FOUND, OpenCall("ghost", {})},
      {"open unknown module", StatusCode::NOT_FOUND,
       OpenCall("m", ModuleScope("layers.7"))},
      {"open parameter as module", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", ModuleScope("layers.1.w"))},
      {"open unknown parameter", StatusCode::NOT_FOUND,
       OpenCall("m", ParamScope({"embed.w", "nope"}))},
      {"open empty parameter list", StatusCode::INVALID_ARGUMENT,
       OpenCall("m",
                options([](pb::SessionOptions* o) { o->mutable_params(); }))},
      {"open home_rank 4", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", options([](pb::SessionOptions* o) {
                  o->set_rank0_only(true);
                  o->set_home_rank(4);
                }))},
      {"open home_rank -1", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", options([](pb::SessionOptions* o) {
                  o->set_rank0_only(true);
                  o->set_home_rank(-1);
                }))},
      {"open read_dtype int32", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", options([](pb::SessionOptions* o) {
                  o->set_read_dtype(pb::DTYPE_INT32);
                }))},
      {"open read_dtype 99", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", options([](pb::SessionOptions* o) {
                  o->set_read_dtype(static_cast<pb::DType>(99));
                }))},
      {"open lease beyond a day", StatusCode::INVALID_ARGUMENT,
       OpenCall("m", options([](pb::SessionOptions* o) {
                  o->set_lease_seconds(1000000);
                }))},
      {"get unknown", StatusCode::NOT_FOUND, get("s-0000000000000000")},
      {"get empty id", StatusCode::NOT_FOUND, get("")},
      {"renew unknown", StatusCode::NOT_FOUND, renew("s-nope", 10)},
      {"renew lease 0", StatusCode::INVALID_ARGUMENT, renew(writer_.id(), 0)},
      {"renew lease beyond a day", StatusCode::INVALID_ARGUMENT,
       renew(writer_.id(), 10000000)},
      {"close unknown", StatusCode::NOT_FOUND, close("s-nope")},
      {"close empty id", StatusCode::NOT_FOUND, close("")},
  });
  // Both sessions are still open and untouched.
  pb::ListSessionsResponse sessions;
  grpc::ClientContext context;
  ASSERT_TRUE(summon_->ListSessions(&context, {}, &sessions).ok());
  EXPECT_EQ(sessions.sessions_size(), 2);
}

TEST_F(BadInputTest, ReadAndStatsRefuseBadInputWithClearCodes) {
  auto read = [&](const std::function<void(pb::ReadTensorRequest*)>& edit) {
    pb::ReadTensorRequest request = ReadOf("layers.1.w");
    edit(&request);
    return ReadCall(request);
  };
  auto stats = [&](const std::function<void(pb::TensorStatsRequest*)>& edit) {
    pb::TensorStatsRequest request;
    request.set_session_id(writer_.id());
    edit(&request);
    return Unary<pb::TensorStatsRequest, pb::TensorStatsResponse>(
        &pb::Summon::Stub::TensorStats, request);
  };
  ExpectAll({
      {"read unknown session", StatusCode::NOT_FOUND,
       read([](auto* r) { r->set_session_id("s-nope"); })},
      {"read unknown fqn", StatusCode::NOT_FOUND,
       read([](auto* r) { r->set_fqn("layers.1.v"); })},
      {"read empty fqn", StatusCode::NOT_FOUND,
       read([](auto* r) { r->set_fqn(""); })},
      {"read fqn outside the scope", StatusCode::NOT_FOUND,
       read([](auto* r) { r->set_fqn("embed.w"); })},
      {"read grad without with_grads", StatusCode::NOT_FOUND,
       read([](auto* r) { r->set_grad(true); })},
      {"read offset -1", StatusCode::OUT_OF_RANGE,
       read([](auto* r) { r->set_element_offset(-1); })},
      {"read offset past the end", StatusCode::OUT_OF_RANGE,
       read([](auto* r) { r->set_element_offset(36); })},
      {"read count past the end", StatusCode::OUT_OF_RANGE, read([](auto* r) {
         r->set_element_offset(30);
         r->set_element_count(6);
       })},
      {"read count -1", StatusCode::OUT_OF_RANGE,
       read([](auto* r) { r->set_element_count(-1); })},
      {"read huge offset", StatusCode::OUT_OF_RANGE,
       read([](auto* r) { r->set_element_offset(INT64_MAX); })},
      {"read as int32", StatusCode::INVALID_ARGUMENT,
       read([](auto* r) { r->set_dtype(pb::DTYPE_INT32); })},
      {"read as dtype 99", StatusCode::INVALID_ARGUMENT,
       read([](auto* r) { r->set_dtype(static_cast<pb::DType>(99)); })},
      {"stats unknown session", StatusCode::NOT_FOUND,
       stats([](auto* r) { r->set_session_id("s-nope"); })},
      {"stats unknown fqn", StatusCode::NOT_FOUND,
       stats([](auto* r) { r->add_fqns("nope"); })},
      {"stats grad without with_grads", StatusCode::NOT_FOUND,
       stats([](auto* r) { r->set_grad(true); })},
      {"stats 4097 bins", StatusCode::INVALID_ARGUMENT,
       stats([](auto* r) { r->set_histogram_bins(4097); })},
  });
}

TEST_F(BadInputTest, MalformedWriteStreamsApplyNothing) {
  const std::vector<float> seeded = Seeded("layers.1.w", 35);
  const std::string eight = FloatBytes({1, 2});
  auto messages = [&](std::vector<pb::WriteTensorRequest> list) {
    return [this, list] { return WriteMessages(list); };
  };
  pb::WriteTensorRequest no_dtype = Header(2);
  no_dtype.mutable_header()->clear_dtype();
  pb::WriteTensorRequest unknown_session = Header(2);
  unknown_session.mutable_header()->set_session_id("s-nope");
  pb::WriteTensorRequest negative_count = Header(0);
  negative_count.mutable_header()->set_element_count(-1);
  pb::WriteTensorRequest unknown_fqn = Header(2);
  unknown_fqn.mutable_header()->set_fqn("nope");
  ExpectAll(
      {
          {"no messages", StatusCode::INVALID_ARGUMENT, messages({})},
          {"data before header", StatusCode::INVALID_ARGUMENT,
           messages({Data(eight), Header(2)})},
          {"two headers", StatusCode::INVALID_ARGUMENT,
           messages({Header(2), Header(2), Data(eight)})},
          {"header after data", StatusCode::INVALID_ARGUMENT,
           messages({Header(4), Data(eight), Header(2), Data(eight)})},
          {"too many bytes", StatusCode::INVALID_ARGUMENT,
           messages({Header(1), Data(eight)})},
          {"too many bytes over two messages", StatusCode::INVALID_ARGUMENT,
           messages({Header(3), Data(eight), Data(eight)})},
          {"truncated stream", StatusCode::INVALID_ARGUMENT,
           messages({Header(4), Data(eight)})},
          {"header only", StatusCode::INVALID_ARGUMENT, messages({Header(4)})},
          {"partial element", StatusCode::INVALID_ARGUMENT,
           messages({Header(-1, 33), Data(eight.substr(0, 6))})},
          {"dtype unset", StatusCode::INVALID_ARGUMENT,
           messages({no_dtype, Data(eight)})},
          {"unknown session", StatusCode::NOT_FOUND,
           messages({unknown_session, Data(eight)})},
          {"unknown fqn", StatusCode::NOT_FOUND,
           messages({unknown_fqn, Data(eight)})},
          {"count -1", StatusCode::OUT_OF_RANGE, messages({negative_count})},
          {"offset past the end", StatusCode::OUT_OF_RANGE,
           messages({Header(2, 34), Data(eight)})},
          {"offset -1", StatusCode::OUT_OF_RANGE,
           messages({Header(2, -1), Data(eight)})},
      },
      [&] { EXPECT_EQ(Read(writer_.id(), "layers.1.w"), seeded); });

  // A cancelled stream applies nothing either.
  {
    grpc::ClientContext context;
    pb::WriteTensorResponse response;
    auto writer = summon_->WriteTensor(&context, &response);
    ASSERT_TRUE(writer->Write(Header(2)));
    ASSERT_TRUE(writer->Write(Data(eight)));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), StatusCode::CANCELLED);
  }
  EXPECT_EQ(Read(writer_.id(), "layers.1.w"), seeded);
  // Closing writes back the untouched tensor.
  Close(writer_.id());
  const pb::Session check = Open("m", ReadOnly());
  EXPECT_EQ(Read(check.id(), "layers.1.w"), seeded);
}

TEST_F(BadInputTest, TrainerRpcsRefuseBadInputWithClearCodes) {
  auto phase = [&](const std::string& model, int rank, int value) {
    return [this, model, rank, value] {
      pb::ReportPhaseRequest request;
      request.set_model(model);
      request.set_rank(rank);
      request.set_phase(static_cast<pb::TrainingPhase>(value));
      pb::ReportPhaseResponse response;
      grpc::ClientContext context;
      return trainer_->ReportPhase(&context, request, &response);
    };
  };
  auto map = [&](const std::string& model, int rank) {
    return [this, model, rank] {
      pb::MapShardsRequest request;
      request.set_model(model);
      request.set_rank(rank);
      pb::MapShardsResponse response;
      grpc::ClientContext context;
      return trainer_->MapShards(&context, request, &response);
    };
  };
  ExpectAll({
      {"phase unknown model", StatusCode::NOT_FOUND,
       phase("ghost", 0, pb::TRAINING_PHASE_IDLE)},
      {"phase rank 4", StatusCode::INVALID_ARGUMENT,
       phase("m", 4, pb::TRAINING_PHASE_IDLE)},
      {"phase rank -1", StatusCode::INVALID_ARGUMENT,
       phase("m", -1, pb::TRAINING_PHASE_IDLE)},
      {"phase unset", StatusCode::INVALID_ARGUMENT, phase("m", 0, 0)},
      {"phase 42", StatusCode::INVALID_ARGUMENT, phase("m", 0, 42)},
      {"map unknown model", StatusCode::NOT_FOUND, map("ghost", 0)},
      {"map rank 4", StatusCode::INVALID_ARGUMENT, map("m", 4)},
      {"map rank -1", StatusCode::INVALID_ARGUMENT, map("m", -1)},
  });
  const pb::Model model = Describe("m");
  for (const pb::RankState& rank : model.ranks()) {
    EXPECT_EQ(rank.phase(), pb::TRAINING_PHASE_IDLE) << rank.rank();
  }
}

// After every kind of bad input above, the daemon is healthy and a normal
// session works end to end.
TEST_F(BadInputTest, DaemonKeepsServingAfterBadInput) {
  ExpectAll({
      {"10 MB layout", StatusCode::RESOURCE_EXHAUSTED,
       [this] {
         pb::CreateModelRequest request;
         request.set_name("x");
         request.set_layout_json(std::string(10 << 20, ' '));
         pb::Model model;
         grpc::ClientContext context;
         return summon_->CreateModel(&context, request, &model);
       }},
      {"data before header", StatusCode::INVALID_ARGUMENT,
       [this] {
         return WriteMessages({Data("abcd"), Header(1)});
       }},
  });
  grpc::health::v1::HealthCheckResponse health;
  {
    grpc::ClientContext context;
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(stub->Check(&context, {}, &health).ok());
  }
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  Close(writer_.id());
  Close(reader_.id());
  const pb::Model model = Describe("m");
  const pb::Session session = Open("m");
  TensorValues expected = SeededBlocks();
  for (const auto& [fqn, values] : expected) {
    EXPECT_EQ(Read(session.id(), fqn), values) << fqn;
  }
  expected["norm.w"] = Scaled(expected["norm.w"], 10);
  ASSERT_TRUE(WriteFloats(session.id(), "norm.w", expected["norm.w"]).ok());
  EXPECT_TRUE(Close(session.id()).written_back());
  EXPECT_EQ(ParamChecksums(Checksum("m")), ExpectedChecksums(model, expected));
}

}  // namespace
}  // namespace summon::tests
