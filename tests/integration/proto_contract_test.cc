// Single behaviours summon.proto documents for odd input, each worth its own
// test: very long names, lease 0, chunk_bytes above 4 MiB, write messages of
// partial elements, writes without a declared count, 128-character names.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/bad_input_fixture.h"

namespace summon::tests {
namespace {

using ProtoContractTest = BadInputTest;

// Names and ids far beyond any real one get the status of what they are
// (unknown: NOT_FOUND; an invalid model name: INVALID_ARGUMENT). An error
// message that echoes such a name whole exceeds gRPC's metadata size limit
// and reaches the client as RESOURCE_EXHAUSTED instead.
TEST_F(ProtoContractTest, VeryLongNamesGetTheStatusOfWhatTheyAre) {
  const std::string long_name(100000, 'a');
  pb::DescribeModelRequest describe;
  describe.set_model(long_name);
  pb::CreateModelRequest create;
  create.set_name(long_name);
  create.set_layout_json(kBlocksLayout);
  pb::GetSessionRequest get;
  get.set_session_id(long_name);
  pb::ReadTensorRequest read = ReadOf(long_name);
  ExpectAll({
      {"describe long name", StatusCode::NOT_FOUND,
       Unary<pb::DescribeModelRequest, pb::Model>(
           &pb::Summon::Stub::DescribeModel, describe)},
      {"create long name", StatusCode::INVALID_ARGUMENT,
       Unary<pb::CreateModelRequest, pb::Model>(&pb::Summon::Stub::CreateModel,
                                                create)},
      {"get long id", StatusCode::NOT_FOUND,
       Unary<pb::GetSessionRequest, pb::Session>(&pb::Summon::Stub::GetSession,
                                                 get)},
      {"read long fqn", StatusCode::NOT_FOUND, ReadCall(read)},
  });
}

// SessionOptions.lease_seconds: "Unset: 60"; "0 is refused
// (INVALID_ARGUMENT)" (issue 33: it was taken for the default).
TEST_F(ProtoContractTest, LeaseSecondsUnsetIsSixtyAndZeroIsRefused) {
  pb::SessionOptions options = ReadOnly();
  pb::Session session;
  grpc::Status status = TryOpen("m", options, &session);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(session.options().lease_seconds(), 60u);
  options.set_lease_seconds(0);
  status = TryOpen("m", options, &session);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "lease must be in (0, 24h] (--lease SECONDS, lease_seconds), got 0");
}

// ReadTensorRequest.chunk_bytes: "clamped ... so that every message stays
// under 4 MiB", read by this fixture's stock channel (gRPC's default 4 MiB
// receive limit) from a 12 MiB tensor.
TEST_F(ProtoContractTest, ReadChunksFitAStockClientsFourMiBLimit) {
  CreateSeeded("big", pb::SHARDING_STRATEGY_FULL_SHARD,
               R"({"units": [{"fqn": "", "params": [
                   {"fqn": "big.w", "shape": [3, 1048576],
                    "dtype": "float32"}]}]})");
  const pb::Session session = Open("big", ReadOnly());
  const std::string expected = FloatBytes(Seeded("big.w", 3 << 20));
  for (uint32_t chunk : {uint32_t{4} << 20, uint32_t{0xFFFFFFFF}}) {
    pb::ReadTensorRequest request;
    request.set_session_id(session.id());
    request.set_fqn("big.w");
    request.set_chunk_bytes(chunk);
    std::string data;
    const grpc::Status status = ReadRaw(request, &data);
    ASSERT_TRUE(status.ok()) << chunk << ": " << status.error_message();
    EXPECT_TRUE(data == expected) << chunk;
  }
}

// WriteTensorRequest.data: "Whole elements ... A length that is not a
// multiple of the element size is INVALID_ARGUMENT" (per message).
TEST_F(ProtoContractTest, WriteDataMessageOfPartialElementsIsInvalid) {
  const std::string eight = FloatBytes({1, 2});
  EXPECT_CODE(WriteMessages(
                  {Header(2), Data(eight.substr(0, 3)), Data(eight.substr(3))}),
              INVALID_ARGUMENT);
  EXPECT_EQ(Read(writer_.id(), "layers.1.w"), Seeded("layers.1.w", 35));
}

// WriteTensorHeader.element_count: "Unset: whatever arrives before the
// half-close" — a stream of fewer elements than the tensor writes just those.
TEST_F(ProtoContractTest, WriteWithoutCountWritesWhatArrived) {
  const grpc::Status status =
      WriteMessages({Header(-1, 10), Data(FloatBytes({7, 8, 9}))});
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<float> expected = Seeded("layers.1.w", 35);
  expected[10] = 7;
  expected[11] = 8;
  expected[12] = 9;
  EXPECT_EQ(Read(writer_.id(), "layers.1.w"), expected);
}

// WriteTensorHeader.whole_tensor (R5 on the server): a whole-tensor write
// must carry the tensor's exact shape and every element; a stock gRPC client
// that says "whole" cannot reshape or short-write. Refusals write nothing.
TEST_F(ProtoContractTest, WholeTensorWritesMustCarryTheTensorsShape) {
  auto whole = [&](std::vector<int64_t> shape, int64_t offset = 0) {
    pb::WriteTensorRequest header = Header(-1, offset);
    header.mutable_header()->set_whole_tensor(true);
    for (int64_t extent : shape) header.mutable_header()->add_shape(extent);
    return header;
  };
  std::vector<float> values(35);
  for (int i = 0; i < 35; ++i) values[i] = 100.0f + i;
  const std::vector<float> seeded = Seeded("layers.1.w", 35);

  // Same element count, transposed shape.
  grpc::Status status =
      WriteMessages({whole({5, 7}), Data(FloatBytes(values))});
  EXPECT_CODE(status, INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("shape [5, 7] differs from [7, 5]"),
            std::string::npos)
      << status.error_message();
  // The right shape, but a short stream.
  status = WriteMessages({whole({7, 5}), Data(FloatBytes({1, 2, 3}))});
  EXPECT_CODE(status, INVALID_ARGUMENT);
  // The right shape from another element than 0.
  status = WriteMessages({whole({7, 5}, 1), Data(FloatBytes({1, 2, 3}))});
  EXPECT_CODE(status, INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("whole-tensor write of shape [7, 5]"),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(Read(writer_.id(), "layers.1.w"), seeded);

  status = WriteMessages({whole({7, 5}), Data(FloatBytes(values))});
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Read(writer_.id(), "layers.1.w"), values);
}

// CreateModelRequest.name: "1 to 128 characters of [A-Za-z0-9._-]".
TEST_F(ProtoContractTest, ModelNamesOfUpTo128CharactersAreAccepted) {
  const std::string name(128, 'n');
  pb::CreateModelRequest request;
  request.set_name(name);
  request.set_layout_json(kBlocksLayout);
  pb::Model model;
  grpc::ClientContext context;
  const grpc::Status status = summon_->CreateModel(&context, request, &model);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(model.name(), name);
  request.set_name(name + "n");
  grpc::ClientContext again;
  EXPECT_CODE(summon_->CreateModel(&again, request, &model), INVALID_ARGUMENT);
}

}  // namespace
}  // namespace summon::tests
