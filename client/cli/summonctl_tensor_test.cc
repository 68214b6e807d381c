// summonctl's tensor verbs: .npy files in and out, the client-side shape
// check and dtype conversion of writes (tied aliases included), stats.

#include <fstream>
#include <string>
#include <vector>

#include "client/files/npy.h"
#include "client/testing/summonctl_test_fixture.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

// 1.0, -2.0, 0.5, 3.0 as float32 and as bfloat16.
constexpr char kFourFloat32s[] =
    "\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x00\x00\x3f\x00\x00\x40\x40";
constexpr char kFourBFloat16s[] = "\x80\x3f\x00\xc0\x00\x3f\x40\x40";

// Writes a float32 .npy of `shape` holding kFourFloat32s (so `shape` must
// have 4 elements) and returns its path.
std::string Float32Npy(const std::string& name, core::Shape shape) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteNpyFile(path, {core::DType::kFloat32, std::move(shape),
                                  std::string(kFourFloat32s, 16)})
                  .ok());
  return path;
}

class SummonctlTensorTest : public SummonctlTest {
 protected:
  // GetSession answers a session "s-1" of model "gpt" listing `param`.
  void SessionWithParam(const v1::TensorInfo& param) {
    v1::Session session;
    session.set_id("s-1");
    session.set_model("gpt");
    *session.add_params() = param;
    summon().SetResponse("GetSession", session);
  }

  // DescribeModel answers a model whose root unit holds an untied "other.w"
  // and `primary`, tied to "unrelated.alias" and `alias`.
  void ModelWithAlias(const std::string& primary, const std::string& alias) {
    v1::Model model;
    model.set_name("gpt");
    v1::Unit& unit = *model.add_units();
    unit.add_params()->mutable_info()->set_fqn("other.w");
    v1::Parameter& tied = *unit.add_params();
    tied.mutable_info()->set_fqn(primary);
    tied.add_aliases("unrelated.alias");
    tied.add_aliases(alias);
    summon().SetResponse("DescribeModel", model);
  }
};

TEST_F(SummonctlTensorTest, TensorReadWritesTheTensorAsNpy) {
  const std::string data("\x80\x3f\x00\x40\x00\xbf\x01\x02\x03\x04\x05\x06",
                         12);
  server_.summon().SetTensor(TensorOf("w", v1::DTYPE_BFLOAT16, {2, 3}), data);
  const std::string path = TempPath("w.npy");
  const SummonctlResult result =
      Run({"tensor", "read", "s-1", "w", "--out", path, "--grad"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out,
            "FQN  DTYPE     SHAPE   NUMEL\n"
            "w    BFLOAT16  [2, 3]  6\n");
  const auto request =
      summon().LastRequest<v1::ReadTensorRequest>("ReadTensor");
  EXPECT_TRUE(request.grad());
  EXPECT_EQ(request.dtype(), v1::DTYPE_UNSPECIFIED);
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, core::DType::kBFloat16);
  EXPECT_EQ(array->shape, core::Shape({2, 3}));
  EXPECT_EQ(array->data, data);

  ASSERT_EQ(
      Run({"tensor", "read", "s-1", "w", "--out", path, "--dtype", "float32"})
          .exit_code,
      0);
  EXPECT_EQ(summon().LastRequest<v1::ReadTensorRequest>("ReadTensor").dtype(),
            v1::DTYPE_FLOAT32);
}

// "--out -" streams the .npy bytes to stdout (the description goes to
// stderr); a file is written whole or not at all.
TEST_F(SummonctlTensorTest, TensorReadStreamsToStdoutAndFilesAtomically) {
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  server_.summon().SetTensor(TensorOf("w", v1::DTYPE_FLOAT32, {2}), data);
  const SummonctlResult piped =
      Run({"tensor", "read", "s-1", "w", "--out", "-"});
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  absl::StatusOr<NpyArray> array = DecodeNpy(piped.out);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, core::Shape({2}));
  EXPECT_EQ(array->data, data);
  EXPECT_EQ(piped.err, "FQN  DTYPE    SHAPE  NUMEL\nw    FLOAT32  [2]    2\n");

  // A stream that breaks off leaves no file under the name asked for.
  v1::ReadTensorResponse first;
  *first.mutable_info() = TensorOf("w", v1::DTYPE_FLOAT32, {4});
  first.set_data(data);
  server_.summon().SetReadStream({first});
  const std::string path = TempPath("cut.npy");
  const SummonctlResult cut =
      Run({"tensor", "read", "s-1", "w", "--out", path});
  EXPECT_EQ(cut.exit_code, 13) << cut.err;  // INTERNAL: 2 of 4 elements.
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_FALSE(std::ifstream(path + ".part").good());
}

TEST_F(SummonctlTensorTest, TensorWriteSendsTheNpyData) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2, 2}));
  const std::string path = TempPath("in.npy");
  const std::string data(
      "\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x00\x00\x3f\x00\x00\x40\x40", 16);
  ASSERT_TRUE(WriteNpyFile(path, {core::DType::kFloat32, {2, 2}, data}).ok());
  const SummonctlResult result =
      Run({"tensor", "write", "s-1", "w", "--in", path});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_EQ(write.header.session_id(), "s-1");
  EXPECT_EQ(write.header.fqn(), "w");
  EXPECT_FALSE(write.header.grad());
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(write.header.element_count(), 4);
  EXPECT_EQ(write.data, data);
}

TEST_F(SummonctlTensorTest, TensorWriteRoundsFloat32IntoABFloat16Tensor) {
  SessionWithParam(TensorOf("w", v1::DTYPE_BFLOAT16, {4}));
  ASSERT_EQ(
      Run({"tensor", "write", "s-1", "w", "--in", Float32Npy("f32.npy", {4})})
          .exit_code,
      0);
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(write.data, std::string(kFourBFloat16s, 8));
}

// Local file problems exit with sysexits codes, not gRPC ones: 66 for an
// input that is missing, 65 for one that is malformed, 73 for an output
// that cannot be written; nothing is sent.
TEST_F(SummonctlTensorTest, LocalFileErrorsHaveTheirOwnExitCodes) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2, 2}));
  EXPECT_EQ(Run({"tensor", "write", "s-1", "w", "--in", TempPath("none.npy")})
                .exit_code,
            66);
  const std::string garbage = TempPath("garbage.npy");
  std::ofstream(garbage) << "not an npy file";
  EXPECT_EQ(Run({"tensor", "write", "s-1", "w", "--in", garbage}).exit_code,
            65);
  EXPECT_EQ(summon().Count("WriteTensor"), 0);
  EXPECT_EQ(Run({"model", "create", "m", "--layout", TempPath("none.json")})
                .exit_code,
            66);
  EXPECT_EQ(summon().Count("CreateModel"), 0);
}

// "--in -" streams a .npy from stdin; a .npy whose data is shorter or
// longer than its header says stops the stream (exit 65), and the server
// applies nothing (its write needs every declared byte).
TEST_F(SummonctlTensorTest, TensorWriteStreamsFromStdinAndRefusesBadLengths) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2}));
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  absl::StatusOr<std::string> npy =
      EncodeNpy({core::DType::kFloat32, {2}, data});
  ASSERT_TRUE(npy.ok());
  const SummonctlResult piped =
      Run({"tensor", "write", "s-1", "w", "--in", "-"}, *npy);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(server_.summon().LastWrite().data, data);
  EXPECT_EQ(server_.summon().LastWrite().header.element_count(), 2);

  EXPECT_EQ(Run({"tensor", "write", "s-1", "w", "--in", "-"},
                npy->substr(0, npy->size() - 1))
                .exit_code,
            65);
  EXPECT_EQ(
      Run({"tensor", "write", "s-1", "w", "--in", "-"}, *npy + "x").exit_code,
      65);
  // Those streams were cancelled: the last write applied is still the first.
  EXPECT_EQ(server_.summon().LastWrite().data, data);
}

TEST_F(SummonctlTensorTest, TensorWriteRefusesAnotherShape) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2, 2}));
  const std::string path = TempPath("flat.npy");
  ASSERT_TRUE(
      WriteNpyFile(path, {core::DType::kFloat32, {4}, std::string(16, '\0')})
          .ok());
  const SummonctlResult result =
      Run({"tensor", "write", "s-1", "w", "--in", path});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: the .npy shape [4] is not w's shape "
            "[2, 2]\n");
  EXPECT_EQ(summon().Count("WriteTensor"), 0);
}

TEST_F(SummonctlTensorTest, TensorWriteOfAListedNameNeedsNoModelDescription) {
  SessionWithParam(TensorOf("w", v1::DTYPE_BFLOAT16, {4}));
  ASSERT_EQ(Run({"tensor", "write", "s-1", "w", "--in",
                 Float32Npy("listed.npy", {4})})
                .exit_code,
            0);
  EXPECT_EQ(summon().Count("GetSession"), 1);
  EXPECT_EQ(summon().Count("DescribeModel"), 0);
}

TEST_F(SummonctlTensorTest, TensorWriteThroughAnAliasConvertsAsForThePrimary) {
  SessionWithParam(TensorOf("embed.w", v1::DTYPE_BFLOAT16, {2, 2}));
  ModelWithAlias("embed.w", "head.w");
  const SummonctlResult result = Run({"tensor", "write", "s-1", "head.w",
                                      "--in", Float32Npy("alias.npy", {2, 2})});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(summon().Count("DescribeModel"), 1);
  EXPECT_EQ(
      summon().LastRequest<v1::DescribeModelRequest>("DescribeModel").model(),
      "gpt");
  const ReceivedWrite write = server_.summon().LastWrite();
  // The server resolves the alias itself; only the data was converted.
  EXPECT_EQ(write.header.fqn(), "head.w");
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(write.header.element_count(), 4);
  EXPECT_EQ(write.data, std::string(kFourBFloat16s, 8));
}

TEST_F(SummonctlTensorTest, TensorWriteThroughAnAliasChecksThePrimarysShape) {
  SessionWithParam(TensorOf("embed.w", v1::DTYPE_FLOAT32, {2, 2}));
  ModelWithAlias("embed.w", "head.w");
  const SummonctlResult result =
      Run({"tensor", "write", "s-1", "head.w", "--in",
           Float32Npy("alias_flat.npy", {4})});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: the .npy shape [4] is not head.w's shape "
            "[2, 2]\n");
  EXPECT_EQ(summon().Count("WriteTensor"), 0);
}

TEST_F(SummonctlTensorTest, TensorWriteThroughAGradAliasUsesTheSessionsGrads) {
  v1::Session session;
  session.set_id("s-1");
  session.set_model("gpt");
  *session.add_params() = TensorOf("embed.w", v1::DTYPE_FLOAT32, {4});
  *session.add_grads() = TensorOf("embed.w", v1::DTYPE_BFLOAT16, {4});
  summon().SetResponse("GetSession", session);
  ModelWithAlias("embed.w", "head.w");
  ASSERT_EQ(Run({"tensor", "write", "s-1", "head.w", "--grad", "--in",
                 Float32Npy("grad_alias.npy", {4})})
                .exit_code,
            0);
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_TRUE(write.header.grad());
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(write.data, std::string(kFourBFloat16s, 8));
}

TEST_F(SummonctlTensorTest, TensorWriteOfAnUnknownNameLeavesItToTheServer) {
  // Neither listed nor an alias, and an alias whose primary the session does
  // not hold: both are sent as they are, for the server's NOT_FOUND.
  SessionWithParam(TensorOf("layers.0.w", v1::DTYPE_BFLOAT16, {4}));
  ModelWithAlias("embed.w", "head.w");
  for (const std::string fqn : {"nosuch.w", "head.w"}) {
    ASSERT_EQ(Run({"tensor", "write", "s-1", fqn, "--in",
                   Float32Npy("unknown.npy", {2, 2})})
                  .exit_code,
              0)
        << fqn;
    const ReceivedWrite write = server_.summon().LastWrite();
    EXPECT_EQ(write.header.fqn(), fqn);
    EXPECT_EQ(write.header.dtype(), v1::DTYPE_FLOAT32) << fqn;
    EXPECT_EQ(write.data, std::string(kFourFloat32s, 16)) << fqn;
  }
  // Each looked up twice: by summonctl, then by the client library's
  // whole-tensor check, since summonctl found nothing to hand it.
  EXPECT_EQ(summon().Count("DescribeModel"), 4);
}

TEST_F(SummonctlTensorTest, TensorWriteFailsWhenTheModelCannotBeDescribed) {
  SessionWithParam(TensorOf("embed.w", v1::DTYPE_FLOAT32, {4}));
  summon().SetError("DescribeModel",
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "leader gone"));
  const SummonctlResult result =
      Run({"tensor", "write", "s-1", "head.w", "--in",
           Float32Npy("undescribed.npy", {4})});
  EXPECT_EQ(result.exit_code, 14);
  EXPECT_EQ(result.err, "ERROR UNAVAILABLE: leader gone\n");
  EXPECT_EQ(summon().Count("WriteTensor"), 0);
}

TEST_F(SummonctlTensorTest, TensorStatsSendsNamesGradAndBins) {
  ASSERT_EQ(
      Run({"tensor", "stats", "s-1", "a.w", "b.w", "--grad", "--bins", "8"})
          .exit_code,
      0);
  const auto request =
      summon().LastRequest<v1::TensorStatsRequest>("TensorStats");
  EXPECT_EQ(request.session_id(), "s-1");
  ASSERT_EQ(request.fqns_size(), 2);
  EXPECT_EQ(request.fqns(0), "a.w");
  EXPECT_TRUE(request.grad());
  EXPECT_EQ(request.histogram_bins(), 8u);

  ASSERT_EQ(Run({"tensor", "stats", "s-1"}).exit_code, 0);
  const auto all = summon().LastRequest<v1::TensorStatsRequest>("TensorStats");
  EXPECT_EQ(all.fqns_size(), 0);
  EXPECT_FALSE(all.has_histogram_bins());
}

}  // namespace
}  // namespace summon::client
