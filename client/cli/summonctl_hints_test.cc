// Errors people can act on (issue 23): a server address without a port and
// a model name outside the daemon's rule are refused before anything is
// sent; a NOT_FOUND FQN gets a "did you mean" as nouns and verbs do; `model
// load` into a new name says how to create it.

#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/files/npy.h"
#include "client/testing/summonctl_test_fixture.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

class SummonctlHintsTest : public SummonctlTest {
 protected:
  // GetSession answers session "s-1" of model "gpt" holding two weights;
  // DescribeModel a model with those and an alias.
  void SessionAndModel() {
    v1::Session session;
    session.set_id("s-1");
    session.set_model("gpt");
    *session.add_params() =
        TensorOf("layers.1.attn.qkv.weight", v1::DTYPE_FLOAT32, {4});
    *session.add_params() =
        TensorOf("layers.1.mlp.fc.weight", v1::DTYPE_FLOAT32, {4});
    summon().SetResponse("GetSession", session);
    v1::Model model;
    model.set_name("gpt");
    v1::Unit& unit = *model.add_units();
    unit.set_fqn("layers.1");
    v1::Parameter& param = *unit.add_params();
    param.mutable_info()->set_fqn("layers.1.attn.qkv.weight");
    param.add_aliases("lm_head.weight");
    summon().SetResponse("DescribeModel", model);
  }
};

TEST_F(SummonctlHintsTest, ServerWithoutAPortIsRefused) {
  for (const std::string address : {"127.0.0.1", "localhost", "::1", "[::1]",
                                    "127.0.0.1:", "127.0.0.1:0"}) {
    const SummonctlResult result =
        RunWithEnvironment({"--server", address, "model", "list"}, "");
    EXPECT_EQ(result.exit_code, 3) << address;
    EXPECT_EQ(result.err, "ERROR INVALID_ARGUMENT: --server '" + address +
                              "' names no port: write HOST:PORT "
                              "(127.0.0.1:7070, [::1]:7070) or unix:PATH\n");
  }
  const SummonctlResult environment =
      RunWithEnvironment({"model", "list"}, "127.0.0.1");
  EXPECT_EQ(environment.exit_code, 3);
  EXPECT_EQ(environment.err.rfind("ERROR INVALID_ARGUMENT: $SUMMON_SERVER "
                                  "'127.0.0.1' names no port",
                                  0),
            0u)
      << environment.err;
  // Addresses that name their port, or a scheme gRPC resolves, pass.
  for (const std::string address :
       {"[::1]:1", "unix:/nonexistent/summon.sock", "dns:localhost:1"}) {
    EXPECT_NE(
        RunWithEnvironment(
            {"--server", address, "model", "list", "--output", "json"}, "")
            .exit_code,
        3)
        << address;
  }
}

TEST_F(SummonctlHintsTest, ModelNamesFollowTheDaemonsRuleAsStated) {
  const std::string longest(128, 'm');
  const std::string layout = TempPath("hints_layout.json");
  { std::ofstream(layout) << "{}"; }
  EXPECT_EQ(Run({"model", "create", longest, "--layout", layout}).exit_code, 0);
  for (const std::string& bad : {longest + "m", std::string("a/b"),
                                 std::string(".."), std::string("")}) {
    const SummonctlResult result =
        Run({"model", "create", bad, "--layout", layout});
    EXPECT_EQ(result.exit_code, 3) << bad;
    EXPECT_EQ(result.err, "ERROR INVALID_ARGUMENT: model name '" + bad +
                              "': use 1 to 128 of A-Z a-z 0-9 . _ - (not '.' "
                              "or '..')\n");
  }
  EXPECT_EQ(summon().Count("CreateModel"), 1);
}

TEST_F(SummonctlHintsTest, LoadIntoANewNameSaysHowToCreate) {
  summon().SetError("LoadModel", grpc::Status(grpc::StatusCode::NOT_FOUND,
                                              "no model named 'fresh'"));
  const SummonctlResult result =
      Run({"model", "load", "fresh", "--from", "ckpt"});
  EXPECT_EQ(result.exit_code, 5);
  EXPECT_EQ(result.err,
            "ERROR NOT_FOUND: no model named 'fresh': to create it from the "
            "checkpoint, add --wrap PREFIX,... (its units) and/or --strategy "
            "S\n");
  // Already asked to create: the answer stands as it is.
  const SummonctlResult creating =
      Run({"model", "load", "fresh", "--from", "ckpt", "--wrap", "layers"});
  EXPECT_EQ(creating.err, "ERROR NOT_FOUND: no model named 'fresh'\n");
}

TEST_F(SummonctlHintsTest, FqnTyposGetADidYouMean) {
  SessionAndModel();
  summon().SetError("TensorStats", grpc::Status(grpc::StatusCode::NOT_FOUND,
                                                "session s-1 has no parameter "
                                                "'layers.1.attn.qkv.weigth'"));
  const SummonctlResult stats =
      Run({"tensor", "stats", "s-1", "layers.1.attn.qkv.weigth"});
  EXPECT_EQ(stats.exit_code, 5);
  EXPECT_EQ(stats.err,
            "ERROR NOT_FOUND: session s-1 has no parameter "
            "'layers.1.attn.qkv.weigth' (did you mean "
            "'layers.1.attn.qkv.weight'?)\n");
  // A name far from every one gets no guess.
  summon().SetError("TensorStats",
                    grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "session s-1 has no parameter 'zzz'"));
  EXPECT_EQ(Run({"tensor", "stats", "s-1", "zzz"}).err,
            "ERROR NOT_FOUND: session s-1 has no parameter 'zzz'\n");
  // Aliases count, and `session open --scope` is checked against the model.
  summon().SetError("OpenSession", grpc::Status(grpc::StatusCode::NOT_FOUND,
                                                "unknown module 'layers.l'"));
  EXPECT_EQ(Run({"session", "open", "gpt", "--scope", "layers.l"}).err,
            "ERROR NOT_FOUND: unknown module 'layers.l' (did you mean "
            "'layers.1'?)\n");
  summon().SetError("OpenSession",
                    grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "unknown parameter 'lm_haed.weight'"));
  EXPECT_EQ(Run({"session", "open", "gpt", "--params", "lm_haed.weight"}).err,
            "ERROR NOT_FOUND: unknown parameter 'lm_haed.weight' (did you "
            "mean 'lm_head.weight'?)\n");
}

// summonctl does not renew sessions: it warns when one it touches is about
// to lapse (its pending edits would be dropped).
TEST_F(SummonctlHintsTest, SessionsAboutToLapseAreWarnedOf) {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  v1::Session session;
  session.set_id("s-1");
  session.set_model("gpt");
  *session.add_params() = TensorOf("w", v1::DTYPE_FLOAT32, {2});
  session.set_expires_at_unix_ms(now_ms + 20'000);
  summon().SetResponse("GetSession", session);
  const SummonctlResult soon = Run({"session", "get", "s-1"});
  EXPECT_EQ(soon.exit_code, 0);
  EXPECT_EQ(soon.err.substr(0, 45),
            "warning: session s-1's lease ends in 20 s: re");
  EXPECT_NE(soon.err.find("summonctl session renew s-1 [--lease SECONDS]"),
            std::string::npos);

  const std::string npy = TempPath("lease.npy");
  ASSERT_TRUE(
      WriteNpyFile(npy, {core::DType::kFloat32, {2}, std::string(8, '\0')})
          .ok());
  const SummonctlResult write =
      Run({"tensor", "write", "s-1", "w", "--in", npy});
  EXPECT_NE(write.err.find("warning: session s-1's lease ends in"),
            std::string::npos)
      << write.err;

  session.set_expires_at_unix_ms(now_ms - 1000);
  v1::ListSessionsResponse listed;
  *listed.add_sessions() = session;
  summon().SetResponse("ListSessions", listed);
  EXPECT_NE(Run({"session", "list"}).err.find("s-1's lease has ended"),
            std::string::npos);

  session.set_expires_at_unix_ms(now_ms + 600'000);
  summon().SetResponse("GetSession", session);
  EXPECT_EQ(Run({"session", "get", "s-1"}).err, "");
}

// The completion script's questions: names from the daemon, one a line,
// sorted; nothing (and exit 0) where the daemon does not answer.
TEST_F(SummonctlHintsTest, CompleteListsTheDaemonsNames) {
  SessionAndModel();
  v1::ListModelsResponse models;
  models.add_models()->set_name("gpt");
  models.add_models()->set_name("bert");
  summon().SetResponse("ListModels", models);
  EXPECT_EQ(Run({"__complete", "models"}).out, "bert\ngpt\n");
  EXPECT_EQ(Run({"__complete", "fqns", "s-1"}).out,
            "layers.1.attn.qkv.weight\nlayers.1.mlp.fc.weight\n"
            "lm_head.weight\n");
  // --scope takes units, --params parameters: each completes only those.
  EXPECT_EQ(Run({"__complete", "units", "gpt"}).out, "layers.1\n");
  EXPECT_EQ(Run({"__complete", "params", "gpt"}).out,
            "layers.1.attn.qkv.weight\nlm_head.weight\n");
  summon().SetError("ListSessions",
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
  const SummonctlResult down = Run({"__complete", "sessions"});
  EXPECT_EQ(down.exit_code, 0);
  EXPECT_EQ(down.out + down.err, "");
}

}  // namespace
TEST_F(SummonctlHintsTest, AParameterOutsideTheSessionsScopeIsSaidSo) {
  SessionAndModel();
  // The model has layers.2's weight too, one edit from the session's
  // layers.1 weight: no did-you-mean, the scope is the problem.
  v1::Model model;
  model.set_name("gpt");
  for (const std::string unit_fqn : {"layers.1", "layers.2"}) {
    v1::Unit& unit = *model.add_units();
    unit.set_fqn(unit_fqn);
    unit.add_params()->mutable_info()->set_fqn(unit_fqn + ".attn.qkv.weight");
  }
  summon().SetResponse("DescribeModel", model);
  summon().SetError("TensorStats",
                    grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "session s-1 has no parameter "
                                 "'layers.2.attn.qkv.weight'"));
  const SummonctlResult stats =
      Run({"tensor", "stats", "s-1", "layers.2.attn.qkv.weight"});
  EXPECT_EQ(stats.exit_code, 5);
  EXPECT_EQ(stats.err,
            "ERROR NOT_FOUND: session s-1 has no parameter "
            "'layers.2.attn.qkv.weight': 'layers.2.attn.qkv.weight' is a "
            "parameter of model 'gpt' outside this session's scope (open one "
            "with --params layers.2.attn.qkv.weight or a --scope that holds "
            "it)\n");
  // A typo is still a typo.
  summon().SetError("TensorStats",
                    grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "session s-1 has no parameter "
                                 "'layers.1.attn.qkv.weigth'"));
  EXPECT_EQ(Run({"tensor", "stats", "s-1", "layers.1.attn.qkv.weigth"}).err,
            "ERROR NOT_FOUND: session s-1 has no parameter "
            "'layers.1.attn.qkv.weigth' (did you mean "
            "'layers.1.attn.qkv.weight'?)\n");
}

}  // namespace summon::client
