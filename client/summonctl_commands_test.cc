#include "client/summonctl_commands.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/fake_summon_service.h"
#include "client/npy.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

v1::TensorInfo TensorOf(const std::string& fqn, v1::DType dtype,
                        std::vector<int64_t> shape) {
  v1::TensorInfo info;
  info.set_fqn(fqn);
  info.set_dtype(dtype);
  int64_t numel = 1;
  for (int64_t dim : shape) {
    info.add_shape(dim);
    numel *= dim;
  }
  info.set_numel(numel);
  return info;
}

class SummonctlTest : public ::testing::Test {
 protected:
  // Runs summonctl against the fake server (through --server).
  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", server_.address()});
    return RunWithEnvironment(args, "");
  }

  static Result RunWithEnvironment(const std::vector<std::string>& args,
                                   const std::string& environment_server) {
    std::ostringstream out, err;
    const int code = RunSummonctl(args, environment_server, out, err);
    return {code, out.str(), err.str()};
  }

  FakeCalls& summon() { return server_.summon().calls(); }

  // GetSession answers a session "s-1" listing `param`.
  void SessionWithParam(const v1::TensorInfo& param) {
    v1::Session session;
    session.set_id("s-1");
    *session.add_params() = param;
    summon().SetResponse("GetSession", session);
  }

  FakeSummonServer server_;
};

TEST_F(SummonctlTest, UsageErrorsExitWithInvalidArgumentAndAUsageLine) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"model"},
      {"model", "frob"},
      {"nope", "list"},
      {"model", "describe"},
      {"model", "list", "extra"},
      {"tensor", "read", "s-1", "w"},
      {"session", "close", "s-1", "--bogus"},
      {"session", "open", "m", "--lease"},
      {"trainer", "phase", "m", "0"},
      {"--output"},
  };
  for (const std::vector<std::string>& args : cases) {
    const Result result = Run(args);
    const std::string line = ::testing::PrintToString(args);
    EXPECT_EQ(result.exit_code, 3) << line;
    EXPECT_EQ(result.out, "") << line;
    EXPECT_EQ(result.err.rfind("ERROR INVALID_ARGUMENT: ", 0), 0u)
        << line << result.err;
    EXPECT_NE(result.err.find("\nusage: summonctl "), std::string::npos)
        << line << result.err;
  }
  EXPECT_EQ(summon().Principals().size(), 0u);
}

TEST_F(SummonctlTest, UsageErrorNamesTheProblemThenTheCommandsUsage) {
  const Result result = Run({"tensor", "read", "s-1", "w", "--grad"});
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: missing flag --out FILE.npy\n"
            "usage: summonctl tensor read ID FQN --out FILE.npy [--grad] "
            "[--dtype D]\n");
}

TEST_F(SummonctlTest, BadValuesExitWithInvalidArgumentBeforeAnyCall) {
  const struct {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"session", "open", "m", "--lease", "x"},
       "ERROR INVALID_ARGUMENT: --lease: 'x' is not a valid number\n"},
      {{"--output", "yaml", "model", "list"},
       "ERROR INVALID_ARGUMENT: --output: 'yaml' is neither table nor json\n"},
      {{"trainer", "phase", "m", "zero", "idle"},
       "ERROR INVALID_ARGUMENT: RANK: 'zero' is not a valid number\n"},
      {{"session", "open", "m", "--params", "a", "--scope", "b"},
       "ERROR INVALID_ARGUMENT: --params names the parameters itself: it "
       "cannot be combined with --scope or --no-recurse\n"},
      {{"tensor", "stats", "s-1", "--bins", "-2"},
       "ERROR INVALID_ARGUMENT: --bins: '-2' is not a valid number\n"},
  };
  for (const auto& c : cases) {
    const Result result = Run(c.args);
    EXPECT_EQ(result.exit_code, 3) << c.err;
    EXPECT_EQ(result.err, c.err);
  }
  EXPECT_EQ(summon().Principals().size(), 0u);
  EXPECT_EQ(server_.trainer().calls().Principals().size(), 0u);
}

TEST_F(SummonctlTest, HelpPrintsEveryCommandAndExitsZero) {
  const Result result = Run({"--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out.rfind("usage: summonctl [--server ADDR] [--output "
                             "table|json] [--principal P] NOUN VERB ...\n",
                             0),
            0u)
      << result.out;
  for (const CommandSpec& command : SummonctlCommands()) {
    EXPECT_NE(result.out.find(UsageLine("summonctl", command)),
              std::string::npos)
        << command.noun << " " << command.verb;
  }
  EXPECT_NE(result.out.find("$SUMMON_SERVER"), std::string::npos);
}

TEST_F(SummonctlTest, ServerErrorsExitWithTheGrpcCode) {
  summon().SetError(
      "DescribeModel",
      grpc::Status(grpc::StatusCode::NOT_FOUND, "model 'gpt' does not exist"));
  const Result result = Run({"model", "describe", "gpt"});
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "ERROR NOT_FOUND: model 'gpt' does not exist\n");

  summon().SetError("CloseSession",
                    grpc::Status(grpc::StatusCode::ABORTED, "generation"));
  EXPECT_EQ(Run({"session", "close", "s-1"}).exit_code, 10);
}

TEST_F(SummonctlTest, ServerComesFromTheFlagElseTheEnvironment) {
  EXPECT_EQ(RunWithEnvironment({"model", "list"}, server_.address()).exit_code,
            0);
  EXPECT_EQ(summon().Count("ListModels"), 1);
  EXPECT_EQ(RunWithEnvironment({"--server", server_.address(), "model", "list"},
                               "unix:/nx")
                .exit_code,
            0);
  EXPECT_EQ(summon().Count("ListModels"), 2);
  EXPECT_EQ(
      RunWithEnvironment({"model", "list"}, "unix:/nonexistent/sock").exit_code,
      14);
}

TEST_F(SummonctlTest, PrincipalFlagReachesTheServer) {
  EXPECT_EQ(Run({"--principal", "bob", "session", "list", "gpt"}).exit_code, 0);
  EXPECT_EQ(summon().Principals(), std::vector<std::string>{"bob"});
  EXPECT_EQ(
      summon().LastRequest<v1::ListSessionsRequest>("ListSessions").model(),
      "gpt");
}

TEST_F(SummonctlTest, JsonOutputIsTheResponseMessage) {
  v1::ListModelsResponse models;
  models.add_models()->set_name("gpt");
  summon().SetResponse("ListModels", models);
  const Result result = Run({"--output", "json", "model", "list"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("\"name\": \"gpt\""), std::string::npos)
      << result.out;
  EXPECT_EQ(result.out.front(), '{');
}

TEST_F(SummonctlTest, SessionOpenPrintsOnlyTheIdInTableMode) {
  v1::Session session;
  session.set_id("s-9");
  session.add_warnings("layers is not a unit: no parameters");
  summon().SetResponse("OpenSession", session);
  const Result table =
      Run({"session", "open", "gpt", "--scope", "layers", "--no-recurse"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_EQ(table.out, "s-9\n");
  EXPECT_EQ(table.err, "warning: layers is not a unit: no parameters\n");

  const Result json = Run({"session", "open", "gpt", "--output=json"});
  EXPECT_NE(json.out.find("\"id\": \"s-9\""), std::string::npos) << json.out;
}

TEST_F(SummonctlTest, SessionOpenFlagsBecomeSessionOptions) {
  ASSERT_EQ(Run({"session", "open", "gpt", "--scope", "layers.1",
                 "--no-recurse", "--no-writeback", "--rank0-only",
                 "--home-rank", "2", "--offload-to-cpu", "--with-grads",
                 "--read-dtype", "bfloat16", "--lease", "30"})
                .exit_code,
            0);
  const v1::OpenSessionRequest request =
      summon().LastRequest<v1::OpenSessionRequest>("OpenSession");
  EXPECT_EQ(request.model(), "gpt");
  const v1::SessionOptions& options = request.options();
  EXPECT_EQ(options.module().fqn(), "layers.1");
  ASSERT_TRUE(options.module().has_recurse());
  EXPECT_FALSE(options.module().recurse());
  ASSERT_TRUE(options.has_writeback());
  EXPECT_FALSE(options.writeback());
  EXPECT_TRUE(options.rank0_only());
  EXPECT_EQ(options.home_rank(), 2);
  EXPECT_TRUE(options.offload_to_cpu());
  EXPECT_TRUE(options.with_grads());
  EXPECT_EQ(options.read_dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(options.lease_seconds(), 30u);
}

TEST_F(SummonctlTest, SessionOpenDefaultsLeaveEveryOptionUnset) {
  ASSERT_EQ(Run({"session", "open", "gpt"}).exit_code, 0);
  const v1::SessionOptions options =
      summon().LastRequest<v1::OpenSessionRequest>("OpenSession").options();
  EXPECT_EQ(options.scope_case(), v1::SessionOptions::SCOPE_NOT_SET);
  EXPECT_FALSE(options.has_writeback());
  EXPECT_FALSE(options.has_home_rank());
  EXPECT_FALSE(options.has_lease_seconds());
  EXPECT_FALSE(options.rank0_only());
  EXPECT_EQ(options.read_dtype(), v1::DTYPE_UNSPECIFIED);

  ASSERT_EQ(Run({"session", "open", "gpt", "--params", "a.w,b.w"}).exit_code,
            0);
  const v1::SessionOptions params =
      summon().LastRequest<v1::OpenSessionRequest>("OpenSession").options();
  ASSERT_EQ(params.params().fqns_size(), 2);
  EXPECT_EQ(params.params().fqns(1), "b.w");
}

TEST_F(SummonctlTest, SessionCloseRenewAndGet) {
  ASSERT_EQ(Run({"session", "close", "s-1", "--abort", "--force"}).exit_code,
            0);
  const auto close =
      summon().LastRequest<v1::CloseSessionRequest>("CloseSession");
  EXPECT_EQ(close.session_id(), "s-1");
  EXPECT_TRUE(close.abort());
  EXPECT_TRUE(close.force());

  v1::Session renewed;
  renewed.set_id("s-1");
  summon().SetResponse("RenewSession", renewed);
  const Result renew = Run({"session", "renew", "s-1"});
  EXPECT_EQ(renew.exit_code, 0);
  EXPECT_NE(renew.out.find("\ns-1 "), std::string::npos) << renew.out;

  ASSERT_EQ(Run({"session", "get", "s-7"}).exit_code, 0);
  EXPECT_EQ(
      summon().LastRequest<v1::GetSessionRequest>("GetSession").session_id(),
      "s-7");
}

TEST_F(SummonctlTest, ModelCreateSendsTheLayoutFileAndOptions) {
  const std::string layout = TempPath("layout.json");
  std::ofstream(layout) << "{\"units\": [{\"fqn\": \"\"}]}";
  ASSERT_EQ(Run({"model", "create", "gpt", "--layout", layout, "--strategy",
                 "no_shard", "--init", "seeded:7", "--grad-ranks", "0,1"})
                .exit_code,
            0);
  const auto request =
      summon().LastRequest<v1::CreateModelRequest>("CreateModel");
  EXPECT_EQ(request.name(), "gpt");
  EXPECT_EQ(request.layout_json(), "{\"units\": [{\"fqn\": \"\"}]}");
  EXPECT_EQ(request.strategy(), v1::SHARDING_STRATEGY_NO_SHARD);
  EXPECT_EQ(request.init().seeded().seed(), 7u);
  EXPECT_EQ(request.grads().ranks_size(), 2);

  const Result missing =
      Run({"model", "create", "gpt", "--layout", TempPath("none.json")});
  EXPECT_EQ(missing.exit_code, 5);
  EXPECT_EQ(summon().Count("CreateModel"), 1);
}

TEST_F(SummonctlTest, ModelLoadCreatesOnlyWithWrapOrStrategy) {
  ASSERT_EQ(Run({"model", "load", "gpt", "--from", "/ckpt", "--wrap",
                 "layers.*,blocks.*", "--strategy", "hybrid_shard"})
                .exit_code,
            0);
  auto request = summon().LastRequest<v1::LoadModelRequest>("LoadModel");
  EXPECT_EQ(request.path(), "/ckpt");
  ASSERT_EQ(request.create().unit_prefixes_size(), 2);
  EXPECT_EQ(request.create().unit_prefixes(1), "blocks.*");
  EXPECT_EQ(request.create().strategy(), v1::SHARDING_STRATEGY_HYBRID_SHARD);

  ASSERT_EQ(Run({"model", "load", "gpt", "--from", "/ckpt"}).exit_code, 0);
  request = summon().LastRequest<v1::LoadModelRequest>("LoadModel");
  EXPECT_FALSE(request.has_create());

  ASSERT_EQ(Run({"model", "save", "gpt", "--to", "out.safetensors"}).exit_code,
            0);
  EXPECT_EQ(summon().LastRequest<v1::SaveModelRequest>("SaveModel").path(),
            "out.safetensors");
  ASSERT_EQ(Run({"model", "checksum", "gpt"}).exit_code, 0);
}

TEST_F(SummonctlTest, TensorReadWritesTheTensorAsNpy) {
  const std::string data("\x80\x3f\x00\x40\x00\xbf\x01\x02\x03\x04\x05\x06",
                         12);
  server_.summon().SetTensor(TensorOf("w", v1::DTYPE_BFLOAT16, {2, 3}), data);
  const std::string path = TempPath("w.npy");
  const Result result =
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

TEST_F(SummonctlTest, TensorWriteSendsTheNpyData) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2, 2}));
  const std::string path = TempPath("in.npy");
  const std::string data(
      "\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x00\x00\x3f\x00\x00\x40\x40", 16);
  ASSERT_TRUE(WriteNpyFile(path, {core::DType::kFloat32, {2, 2}, data}).ok());
  const Result result = Run({"tensor", "write", "s-1", "w", "--in", path});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_EQ(write.header.session_id(), "s-1");
  EXPECT_EQ(write.header.fqn(), "w");
  EXPECT_FALSE(write.header.grad());
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(write.header.element_count(), 4);
  EXPECT_EQ(write.data, data);
}

TEST_F(SummonctlTest, TensorWriteRoundsFloat32IntoABFloat16Tensor) {
  SessionWithParam(TensorOf("w", v1::DTYPE_BFLOAT16, {4}));
  const std::string path = TempPath("f32.npy");
  // 1.0, -2.0, 0.5, 3.0 as float32.
  ASSERT_TRUE(
      WriteNpyFile(path, {core::DType::kFloat32,
                          {4},
                          std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0"
                                      "\x00\x00\x00\x3f\x00\x00\x40\x40",
                                      16)})
          .ok());
  ASSERT_EQ(Run({"tensor", "write", "s-1", "w", "--in", path}).exit_code, 0);
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(write.data, std::string("\x80\x3f\x00\xc0\x00\x3f\x40\x40", 8));
}

TEST_F(SummonctlTest, TensorWriteRefusesAnotherShape) {
  SessionWithParam(TensorOf("w", v1::DTYPE_FLOAT32, {2, 2}));
  const std::string path = TempPath("flat.npy");
  ASSERT_TRUE(
      WriteNpyFile(path, {core::DType::kFloat32, {4}, std::string(16, '\0')})
          .ok());
  const Result result = Run({"tensor", "write", "s-1", "w", "--in", path});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: the .npy shape [4] is not w's shape "
            "[2, 2]\n");
  EXPECT_EQ(summon().Count("WriteTensor"), 0);
}

TEST_F(SummonctlTest, TensorWriteOfAnUnlistedNameLeavesItToTheServer) {
  SessionWithParam(TensorOf("embed.w", v1::DTYPE_FLOAT32, {2}));
  const std::string path = TempPath("alias.npy");
  ASSERT_TRUE(
      WriteNpyFile(path, {core::DType::kFloat64, {2}, std::string(16, '\0')})
          .ok());
  ASSERT_EQ(Run({"tensor", "write", "s-1", "head.w", "--in", path, "--grad"})
                .exit_code,
            0);
  const ReceivedWrite write = server_.summon().LastWrite();
  EXPECT_EQ(write.header.fqn(), "head.w");
  EXPECT_TRUE(write.header.grad());
  EXPECT_EQ(write.header.dtype(), v1::DTYPE_FLOAT64);
}

TEST_F(SummonctlTest, TensorStatsSendsNamesGradAndBins) {
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

TEST_F(SummonctlTest, TrainerPhaseReportsThePhase) {
  v1::ReportPhaseResponse reply;
  reply.set_previous_phase(v1::TRAINING_PHASE_IDLE);
  reply.set_phase(v1::TRAINING_PHASE_FORWARD);
  reply.set_step(12);
  server_.trainer().calls().SetResponse("ReportPhase", reply);
  const Result result = Run({"trainer", "phase", "gpt", "3", "forward",
                             "--step", "12", "--deadline-ms", "500"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out,
            "previous_phase  IDLE\n"
            "phase           FORWARD\n"
            "step            12\n"
            "waited_ms       0\n"
            "\n"
            "UNIT  GENERATION\n");
  const auto request =
      server_.trainer().calls().LastRequest<v1::ReportPhaseRequest>(
          "ReportPhase");
  EXPECT_EQ(request.model(), "gpt");
  EXPECT_EQ(request.rank(), 3);
  EXPECT_EQ(request.phase(), v1::TRAINING_PHASE_FORWARD);
  EXPECT_EQ(request.step(), 12);
  EXPECT_EQ(request.deadline_ms(), 500u);
}

}  // namespace
}  // namespace summon::client
