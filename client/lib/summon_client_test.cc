#include "client/lib/summon_client.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/lib/wire_dtype.h"
#include "client/testing/fake_summon_service.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

// `bytes` bytes of a pattern without a short period (the top byte of a Weyl
// sequence), so a chunk out of place changes the result.
std::string PatternBytes(size_t bytes) {
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<char>((i * 0x9E3779B97F4A7C15ull) >> 56);
  }
  return data;
}

v1::TensorInfo Float32Tensor(const std::string& fqn, int64_t rows,
                             int64_t cols) {
  v1::TensorInfo info;
  info.set_fqn(fqn);
  info.set_dtype(v1::DTYPE_FLOAT32);
  info.add_shape(rows);
  info.add_shape(cols);
  info.set_numel(rows * cols);
  return info;
}

TEST(FromGrpcStatusTest, MapsEveryCodeByNumberAndKeepsTheMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status = FromGrpcStatus(
        grpc::Status(static_cast<grpc::StatusCode>(code), "why"));
    EXPECT_EQ(status.raw_code(), code);
    EXPECT_EQ(status.message(), "why");
  }
}

TEST(WireDTypeTest, FloatingDTypesHaveCoreDTypesAndSizes) {
  EXPECT_EQ(ElementSize(v1::DTYPE_FLOAT32), 4u);
  EXPECT_EQ(ElementSize(v1::DTYPE_FLOAT64), 8u);
  EXPECT_EQ(ElementSize(v1::DTYPE_FLOAT16), 2u);
  EXPECT_EQ(ElementSize(v1::DTYPE_BFLOAT16), 2u);
  EXPECT_EQ(ElementSize(v1::DTYPE_UNSPECIFIED), 0u);
  EXPECT_EQ(CoreDType(v1::DTYPE_BFLOAT16), core::DType::kBFloat16);
  EXPECT_EQ(WireDType(core::DType::kFloat16), v1::DTYPE_FLOAT16);
  EXPECT_EQ(CoreDType(static_cast<v1::DType>(99)), std::nullopt);
}

class SummonClientTest : public ::testing::Test {
 protected:
  SummonClient Client(ClientOptions options = {}) {
    return SummonClient(server_.address(), options);
  }

  FakeSummonServer server_;
};

TEST_F(SummonClientTest, ServerErrorsArriveAsAbslStatusWithCodeAndMessage) {
  server_.summon().calls().SetError(
      "DescribeModel",
      grpc::Status(grpc::StatusCode::NOT_FOUND, "model 'gpt' does not exist"));
  absl::StatusOr<v1::Model> model = Client().DescribeModel("gpt");
  EXPECT_EQ(model.status(), absl::NotFoundError("model 'gpt' does not exist"));
  EXPECT_EQ(server_.summon()
                .calls()
                .LastRequest<v1::DescribeModelRequest>("DescribeModel")
                .model(),
            "gpt");
}

TEST_F(SummonClientTest, PrincipalMetadataReachesTheServerOnEveryCall) {
  ClientOptions options;
  options.principal = "alice@example";
  const SummonClient client = Client(options);
  server_.summon().SetTensor(Float32Tensor("w", 1, 2), std::string(8, '\0'));
  ASSERT_TRUE(client.ListModels().ok());
  ASSERT_TRUE(client.ReadTensor({{"s", "w"}}).ok());
  ASSERT_TRUE(
      client.WriteTensor({{"s", "w"}, v1::DTYPE_FLOAT32}, std::string(8, '\0'))
          .ok());
  ASSERT_TRUE(client.ReportPhase("m", 0, v1::TRAINING_PHASE_FORWARD).ok());
  // The whole-tensor write looked the tensor up (GetSession, DescribeModel).
  EXPECT_EQ(server_.summon().calls().Principals(),
            std::vector<std::string>(5, "alice@example"));
  EXPECT_EQ(server_.trainer().calls().Principals(),
            std::vector<std::string>{"alice@example"});
}

TEST_F(SummonClientTest, APrincipalMetadataCannotCarryFailsEveryCall) {
  for (const std::string principal : {"line\nbreak", "\xc3\x89mile"}) {
    ClientOptions options;
    options.principal = principal;
    const SummonClient client = Client(options);
    EXPECT_EQ(client.ListModels().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(client.ReadTensor({{"s", "w"}}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        client.WriteTensor({{"s", "w"}, v1::DTYPE_FLOAT32}, "").status().code(),
        absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(server_.summon().calls().Principals().empty());
}

TEST_F(SummonClientTest, NoPrincipalSendsNoMetadata) {
  ASSERT_TRUE(Client().ListModels().ok());
  EXPECT_EQ(server_.summon().calls().Principals(),
            std::vector<std::string>{""});
}

TEST_F(SummonClientTest, CreateModelSendsItsParameters) {
  CreateModelParams params;
  params.name = "gpt";
  params.layout_json = "{\"units\": []}";
  params.strategy = v1::SHARDING_STRATEGY_NO_SHARD;
  params.init.mutable_seeded()->set_seed(42);
  params.grad_ranks = std::vector<int32_t>{0, 2};
  params.grad_init.mutable_seeded()->set_seed(9);
  v1::Model reply;
  reply.set_name("gpt");
  server_.summon().calls().SetResponse("CreateModel", reply);
  absl::StatusOr<v1::Model> model = Client().CreateModel(params);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name(), "gpt");
  const auto request =
      server_.summon().calls().LastRequest<v1::CreateModelRequest>(
          "CreateModel");
  EXPECT_EQ(request.name(), "gpt");
  EXPECT_EQ(request.layout_json(), "{\"units\": []}");
  EXPECT_EQ(request.strategy(), v1::SHARDING_STRATEGY_NO_SHARD);
  EXPECT_EQ(request.init().seeded().seed(), 42u);
  ASSERT_TRUE(request.has_grads());
  EXPECT_EQ(std::vector<int32_t>(request.grads().ranks().begin(),
                                 request.grads().ranks().end()),
            std::vector<int32_t>({0, 2}));
  EXPECT_EQ(request.grads().init().seeded().seed(), 9u);
}

TEST_F(SummonClientTest, CreateModelGradRanksUnsetMeansNoGradsEmptyMeansAll) {
  CreateModelParams params;
  params.name = "a";
  ASSERT_TRUE(Client().CreateModel(params).ok());
  auto request = server_.summon().calls().LastRequest<v1::CreateModelRequest>(
      "CreateModel");
  EXPECT_FALSE(request.has_grads());
  EXPECT_FALSE(request.has_strategy());

  params.grad_ranks = std::vector<int32_t>();
  ASSERT_TRUE(Client().CreateModel(params).ok());
  request = server_.summon().calls().LastRequest<v1::CreateModelRequest>(
      "CreateModel");
  EXPECT_TRUE(request.has_grads());
  EXPECT_EQ(request.grads().ranks_size(), 0);
  EXPECT_EQ(request.grads().init().method_case(),
            v1::InitMethod::METHOD_NOT_SET);
}

TEST_F(SummonClientTest, CreateModelRefusesGradInitWithoutGradRanks) {
  CreateModelParams params;
  params.name = "a";
  params.grad_init.mutable_zeros();
  const absl::Status status = Client().CreateModel(params).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(server_.summon().calls().Count("CreateModel"), 0);
}

TEST_F(SummonClientTest, SessionCallsSendTheirArguments) {
  const SummonClient client = Client();
  v1::SessionOptions options;
  options.mutable_module()->set_fqn("layers.1");
  options.set_writeback(false);
  ASSERT_TRUE(client.OpenSession("gpt", options).ok());
  const auto open =
      server_.summon().calls().LastRequest<v1::OpenSessionRequest>(
          "OpenSession");
  EXPECT_EQ(open.model(), "gpt");
  EXPECT_EQ(open.options().module().fqn(), "layers.1");
  EXPECT_TRUE(open.options().has_writeback());
  EXPECT_FALSE(open.options().writeback());

  ASSERT_TRUE(client.RenewSession("s1").ok());
  EXPECT_FALSE(server_.summon()
                   .calls()
                   .LastRequest<v1::RenewSessionRequest>("RenewSession")
                   .has_lease_seconds());
  ASSERT_TRUE(client.RenewSession("s1", 90).ok());
  EXPECT_EQ(server_.summon()
                .calls()
                .LastRequest<v1::RenewSessionRequest>("RenewSession")
                .lease_seconds(),
            90u);

  ASSERT_TRUE(client.CloseSession("s1", /*abort=*/true, /*force=*/false).ok());
  auto close = server_.summon().calls().LastRequest<v1::CloseSessionRequest>(
      "CloseSession");
  EXPECT_EQ(close.session_id(), "s1");
  EXPECT_TRUE(close.abort());
  EXPECT_FALSE(close.force());

  ASSERT_TRUE(client.ListSessions("gpt").ok());
  EXPECT_EQ(server_.summon()
                .calls()
                .LastRequest<v1::ListSessionsRequest>("ListSessions")
                .model(),
            "gpt");

  ASSERT_TRUE(client.TensorStats("s1", {"a", "b"}, true, 0).ok());
  const auto stats =
      server_.summon().calls().LastRequest<v1::TensorStatsRequest>(
          "TensorStats");
  EXPECT_EQ(stats.fqns_size(), 2);
  EXPECT_EQ(stats.fqns(1), "b");
  EXPECT_TRUE(stats.grad());
  EXPECT_TRUE(stats.has_histogram_bins());
  EXPECT_EQ(stats.histogram_bins(), 0u);
}

TEST_F(SummonClientTest, ModelCallsSendTheirArguments) {
  const SummonClient client = Client();
  v1::CheckpointWrapRule rule;
  rule.add_unit_prefixes("layers.*");
  ASSERT_TRUE(client.LoadModel("gpt", "/ckpt", rule).ok());
  auto load =
      server_.summon().calls().LastRequest<v1::LoadModelRequest>("LoadModel");
  EXPECT_EQ(load.path(), "/ckpt");
  ASSERT_TRUE(load.has_create());
  EXPECT_EQ(load.create().unit_prefixes(0), "layers.*");
  ASSERT_TRUE(client.LoadModel("gpt", "/ckpt").ok());
  EXPECT_FALSE(server_.summon()
                   .calls()
                   .LastRequest<v1::LoadModelRequest>("LoadModel")
                   .has_create());

  ASSERT_TRUE(client.SaveModel("gpt", "out.safetensors", 1024).ok());
  const auto save =
      server_.summon().calls().LastRequest<v1::SaveModelRequest>("SaveModel");
  EXPECT_EQ(save.path(), "out.safetensors");
  EXPECT_EQ(save.max_file_bytes(), 1024u);
}

TEST_F(SummonClientTest, ReadTensorConcatenatesChunksInOrder) {
  const std::string data = PatternBytes(1000 * 4);
  server_.summon().SetTensor(Float32Tensor("layers.0.w", 10, 100), data);
  ReadTensorParams params{{"s1", "layers.0.w", true}};
  params.chunk_bytes = 1000;
  absl::StatusOr<TensorData> tensor = Client().ReadTensor(params);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->data, data);
  EXPECT_EQ(tensor->element_offset, 0);
  EXPECT_EQ(tensor->info.numel(), 1000);
  const auto request =
      server_.summon().calls().LastRequest<v1::ReadTensorRequest>("ReadTensor");
  EXPECT_TRUE(request.grad());
  EXPECT_EQ(request.chunk_bytes(), 1000u);
}

TEST_F(SummonClientTest, ReadTensorReadsAnElementRange) {
  const std::string data = PatternBytes(1000 * 4);
  server_.summon().SetTensor(Float32Tensor("w", 10, 100), data);
  ReadTensorParams params{{"s1", "w"}};
  params.element_offset = 100;
  params.element_count = 650;
  params.chunk_bytes = 256;
  absl::StatusOr<TensorData> tensor = Client().ReadTensor(params);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->element_offset, 100);
  EXPECT_EQ(tensor->data, data.substr(400, 650 * 4));
}

// Reads through a fixed stream of messages; the first carries the info of a
// 4-element float32 tensor.
class ReadStreamTest : public SummonClientTest {
 protected:
  absl::Status ReadThrough(std::vector<v1::ReadTensorResponse> messages) {
    server_.summon().SetReadStream(std::move(messages));
    return Client().ReadTensor({{"s1", "w"}}).status();
  }

  static v1::ReadTensorResponse Chunk(int64_t offset, size_t bytes,
                                      bool with_info = false) {
    v1::ReadTensorResponse chunk;
    if (with_info) *chunk.mutable_info() = Float32Tensor("w", 2, 2);
    chunk.set_element_offset(offset);
    chunk.set_data(std::string(bytes, '\x01'));
    return chunk;
  }
};

TEST_F(ReadStreamTest, AcceptsContiguousChunks) {
  EXPECT_TRUE(ReadThrough({Chunk(0, 8, true), Chunk(2, 8)}).ok());
}

TEST_F(ReadStreamTest, RejectsAGapBetweenChunks) {
  EXPECT_EQ(
      ReadThrough({Chunk(0, 4, true), Chunk(2, 8)}),
      absl::InternalError("ReadTensor stream: chunk at element 2, expected 1"));
}

TEST_F(ReadStreamTest, RejectsAnOverlap) {
  EXPECT_EQ(
      ReadThrough({Chunk(0, 8, true), Chunk(1, 4)}),
      absl::InternalError("ReadTensor stream: chunk at element 1, expected 2"));
}

TEST_F(ReadStreamTest, RejectsAStreamEndingEarly) {
  EXPECT_EQ(
      ReadThrough({Chunk(0, 8, true)}),
      absl::InternalError("ReadTensor stream: ended after 2 of 4 elements"));
}

TEST_F(ReadStreamTest, RejectsMoreElementsThanAskedFor) {
  EXPECT_EQ(ReadThrough({Chunk(0, 8, true), Chunk(2, 12)}),
            absl::InternalError(
                "ReadTensor stream: more than the 4 elements asked for"));
}

TEST_F(ReadStreamTest, RejectsPartialElementsAndAMissingInfo) {
  EXPECT_EQ(ReadThrough({Chunk(0, 6, true)}),
            absl::InternalError(
                "ReadTensor stream: 6 bytes is not whole 4-byte elements"));
  EXPECT_EQ(ReadThrough({Chunk(0, 8)}),
            absl::InternalError("ReadTensor stream: first chunk has no info"));
  EXPECT_EQ(ReadThrough({}),
            absl::InternalError("ReadTensor stream: no chunk arrived"));
}

TEST_F(SummonClientTest, WriteTensorSendsOneHeaderThenMiBChunks) {
  server_.summon().SetTensor(Float32Tensor("w", 1024, 768), "");
  const std::string data = PatternBytes(3 * (1 << 20) + 8);
  WriteTensorParams params{{"s1", "w", true}, v1::DTYPE_FLOAT32, 16};
  absl::StatusOr<v1::WriteTensorResponse> written =
      Client().WriteTensor(params, data);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->elements_written(), 786434);

  const ReceivedWrite received = server_.summon().LastWrite();
  EXPECT_EQ(received.is_header,
            std::vector<bool>({true, false, false, false, false}));
  EXPECT_EQ(received.chunk_sizes,
            std::vector<size_t>({1 << 20, 1 << 20, 1 << 20, 8}));
  EXPECT_EQ(received.data, data);
  EXPECT_EQ(received.header.session_id(), "s1");
  EXPECT_EQ(received.header.fqn(), "w");
  EXPECT_TRUE(received.header.grad());
  EXPECT_EQ(received.header.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(received.header.element_offset(), 16);
  ASSERT_TRUE(received.header.has_element_count());
  EXPECT_EQ(received.header.element_count(), 786434);
}

TEST_F(SummonClientTest, WriteChunksHoldWholeElements) {
  ClientOptions options;
  options.write_chunk_bytes = 7;
  const std::string data = PatternBytes(10 * 2);
  ASSERT_TRUE(Client(options)
                  .WriteTensor({{"s1", "w"}, v1::DTYPE_BFLOAT16}, data)
                  .ok());
  const ReceivedWrite received = server_.summon().LastWrite();
  EXPECT_EQ(received.chunk_sizes, std::vector<size_t>({6, 6, 6, 2}));
  EXPECT_EQ(received.data, data);
}

TEST_F(SummonClientTest, WriteTensorRefusesBytesThatAreNotWholeElements) {
  EXPECT_EQ(Client()
                .WriteTensor({{"s1", "w"}, v1::DTYPE_FLOAT64}, "0123456789")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client()
                .WriteTensor({{"s1", "w"}, v1::DTYPE_UNSPECIFIED}, "0123")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_.summon().calls().Count("WriteTensor"), 0);
}

// A whole-tensor write must have the tensor's exact shape: the client
// refuses another one (or a short write) before sending anything.
TEST_F(SummonClientTest, WholeTensorWritesNeedTheExactShape) {
  v1::Session session;
  session.set_id("s1");
  *session.add_params() = Float32Tensor("w", 48, 16);
  server_.summon().calls().SetResponse("GetSession", session);
  const SummonClient client = Client();
  WriteTensorParams params{{"s1", "w"}, v1::DTYPE_FLOAT32};
  params.shape = {16, 48};
  EXPECT_EQ(client.WriteTensor(params, std::string(768 * 4, '\0')).status(),
            absl::InvalidArgumentError(
                "'w' has shape [48, 16], the data has shape [16, 48]: a "
                "whole-tensor write needs the exact shape (R5); reshape the "
                "data, or write a range with element_offset"));
  params.shape.clear();
  EXPECT_EQ(client.WriteTensor(params, std::string(10 * 4, '\0')).status(),
            absl::InvalidArgumentError(
                "'w' has shape [48, 16] (768 elements), the data has shape "
                "[10]: a whole-tensor write needs the exact shape (R5); "
                "reshape the data, or write a range with element_offset"));
  params.shape = {2, 5};
  EXPECT_EQ(client.WriteTensor(params, std::string(12 * 4, '\0')).status(),
            absl::InvalidArgumentError(
                "the data's shape [2, 5] has 10 elements, the data 12"));
  EXPECT_EQ(server_.summon().calls().Count("WriteTensor"), 0);

  // The exact shape, or a range named explicitly, is sent.
  params.shape = {48, 16};
  EXPECT_TRUE(client.WriteTensor(params, std::string(768 * 4, '\0')).ok());
  params.shape.clear();
  params.element_offset = 700;
  EXPECT_TRUE(client.WriteTensor(params, std::string(10 * 4, '\0')).ok());
  EXPECT_EQ(server_.summon().LastWrite().header.element_offset(), 700);
  EXPECT_EQ(server_.summon().LastWrite().header.element_count(), 10);
  params.element_offset = -1;
  EXPECT_EQ(client.WriteTensor(params, std::string(4, '\0')).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(server_.summon().calls().Count("WriteTensor"), 2);
}

TEST_F(SummonClientTest, WriteTensorReportsTheServersRefusal) {
  server_.summon().calls().SetError(
      "WriteTensor",
      grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "range beyond numel"));
  EXPECT_EQ(Client()
                .WriteTensor({{"s1", "w"}, v1::DTYPE_FLOAT32},
                             std::string(3 << 20, '\0'))
                .status(),
            absl::OutOfRangeError("range beyond numel"));
}

TEST_F(SummonClientTest, CallsOverTheTimeoutFailWithDeadlineExceeded) {
  ClientOptions options;
  options.timeout = absl::Milliseconds(100);
  server_.summon().calls().SetDelay("ListModels", absl::Milliseconds(600));
  EXPECT_EQ(Client(options).ListModels().status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SummonClientTest, ReportPhaseDeadlineExtendsTheCallsOwn) {
  ClientOptions options;
  options.timeout = absl::Milliseconds(100);
  server_.trainer().calls().SetDelay("ReportPhase", absl::Milliseconds(400));
  const SummonClient client = Client(options);
  absl::StatusOr<v1::ReportPhaseResponse> waited =
      client.ReportPhase("gpt", 3, v1::TRAINING_PHASE_BACKWARD, 17, 2000);
  ASSERT_TRUE(waited.ok()) << waited.status();
  const auto request =
      server_.trainer().calls().LastRequest<v1::ReportPhaseRequest>(
          "ReportPhase");
  EXPECT_EQ(request.model(), "gpt");
  EXPECT_EQ(request.rank(), 3);
  EXPECT_EQ(request.phase(), v1::TRAINING_PHASE_BACKWARD);
  EXPECT_EQ(request.step(), 17);
  EXPECT_EQ(request.deadline_ms(), 2000u);
  EXPECT_EQ(
      client.ReportPhase("gpt", 3, v1::TRAINING_PHASE_IDLE).status().code(),
      absl::StatusCode::kDeadlineExceeded);
}

// A daemon that looks local but whose buffer socket this client cannot
// reach (behind a tunnel, another network namespace; here a name nobody
// listens on): the read is answered again as a stream into the buffer,
// and later reads ask for the stream at once.
TEST_F(SummonClientTest, ReadSlicesStreamsWhenTheBufferSocketIsOutOfReach) {
  const std::string packed = PatternBytes(48);
  v1::SliceLayout first;
  first.set_offset(0);
  first.set_bytes(32);
  first.set_dtype(v1::DTYPE_FLOAT32);
  first.add_shape(8);
  v1::SliceLayout second;
  second.set_offset(32);
  second.set_bytes(16);
  second.set_dtype(v1::DTYPE_FLOAT32);
  second.add_shape(4);
  server_.summon().SetSlices({first, second}, packed,
                             absl::StrCat("@summon-unreachable-", getpid()));
  absl::StatusOr<SliceBuffer> buffer = SliceBuffer::Create(64);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const SummonClient client = Client();
  v1::ReadSlicesRequest request;
  request.set_model("m");
  request.set_version(3);
  request.add_entries()->set_fqn("a");
  request.add_entries()->set_fqn("b");
  for (int read = 0; read < 2; ++read) {
    absl::StatusOr<SlicesData> data = client.ReadSlices(request, &*buffer);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_FALSE(data->local_buffer);
    ASSERT_EQ(data->entries.size(), 2u);
    EXPECT_EQ(data->entries[1].offset(), 32);
    EXPECT_EQ(data->stats.slice_bytes(), 48);
    EXPECT_TRUE(buffer->complete());
    EXPECT_EQ(buffer->total_bytes(), 48);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(buffer->packed()),
                          packed.size()),
              packed);
  }
  // Asked for the buffer once, then the stream (that read again and the
  // next read).
  EXPECT_EQ(server_.summon().SliceBufferAsks(),
            (std::vector<bool>{true, false, false}));
}

TEST(SummonClientUnixSocketTest, ConnectsToAUnixSocketTarget) {
  // Socket paths are limited to 107 bytes, too few for TEST_TMPDIR.
  char directory[] = "/tmp/summon_client_test.XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string socket = absl::StrCat(directory, "/summon.sock");
  {
    FakeSummonServer server(absl::StrCat("unix:", socket));
    v1::MapShardsResponse reply;
    reply.set_segment_name("/summon.gpt.1");
    server.trainer().calls().SetResponse("MapShards", reply);
    absl::StatusOr<v1::MapShardsResponse> shards =
        SummonClient(absl::StrCat("unix:", socket)).MapShards("gpt", 1);
    ASSERT_TRUE(shards.ok()) << shards.status();
    EXPECT_EQ(shards->segment_name(), "/summon.gpt.1");
  }
  unlink(socket.c_str());
  rmdir(directory);
}

}  // namespace
}  // namespace summon::client
