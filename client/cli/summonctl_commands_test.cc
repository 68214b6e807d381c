#include "client/cli/summonctl_commands.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/testing/summonctl_test_fixture.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

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
    const SummonctlResult result = Run(args);
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
  const SummonctlResult result = Run({"tensor", "read", "s-1", "w", "--grad"});
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: missing flag --out FILE.npy|-\n"
            "usage: summonctl tensor read ID FQN --out FILE.npy|- [--grad] "
            "[--dtype D] [--no-map]\n");
}

TEST_F(SummonctlTest, BadValuesExitWithInvalidArgumentBeforeAnyCall) {
  const struct {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"session", "open", "m", "--lease", "x"},
       "ERROR INVALID_ARGUMENT: --lease: 'x' is not a valid number\n"},
      {{"--output", "xml", "model", "list"},
       "ERROR INVALID_ARGUMENT: --output: 'xml' is none of table, json and "
       "yaml\n"},
      {{"trainer", "phase", "m", "zero", "idle"},
       "ERROR INVALID_ARGUMENT: RANK: 'zero' is not a valid number\n"},
      {{"session", "open", "m", "--params", "a", "--scope", "b"},
       "ERROR INVALID_ARGUMENT: --params names the parameters itself: it "
       "cannot be combined with --scope or --no-recurse\n"},
      {{"tensor", "stats", "s-1", "--bins", "-2"},
       "ERROR INVALID_ARGUMENT: --bins: '-2' is not a valid number\n"},
  };
  for (const auto& c : cases) {
    const SummonctlResult result = Run(c.args);
    EXPECT_EQ(result.exit_code, 3) << c.err;
    EXPECT_EQ(result.err, c.err);
  }
  EXPECT_EQ(summon().Principals().size(), 0u);
  EXPECT_EQ(server_.trainer().calls().Principals().size(), 0u);
}

TEST_F(SummonctlTest, HelpPrintsEveryCommandAndExitsZero) {
  const SummonctlResult result = Run({"--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(
      result.out.rfind(
          "usage: summonctl [--server ADDR] [--output "
          "table|json|yaml] [--principal P] [--tls-ca PEM] [--tls-cert PEM] "
          "[--tls-key PEM] [--token-file FILE] [--quiet] NOUN VERB ...\n",
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

TEST_F(SummonctlTest, HelpNounVerbVersionAndCompletion) {
  SummonctlResult help = Run({"help", "session", "close"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.substr(0, help.out.find("\nglobal flags:")),
            "summonctl session close ID [--abort] [--force]\n"
            "\n"
            "flags:\n"
            "  --abort  drop the session without writing anything back\n"
            "  --force  write back even if training moved the units since "
            "the gather (R7)\n");
  help = Run({"help", "trainer"});
  EXPECT_EQ(help.out,
            "summonctl trainer phase M RANK PHASE [--step N] [--deadline-ms "
            "N]\n");
  help = Run({"help", "sesion"});
  EXPECT_EQ(help.exit_code, 3);
  EXPECT_EQ(help.err.substr(0, 68),
            "ERROR INVALID_ARGUMENT: unknown noun 'sesion' (did you mean "
            "'session");
  EXPECT_EQ(Run({"--version"}).out, "summonctl 0.1.0 (API summon.v1)\n");
  const SummonctlResult bash = Run({"completion", "bash"});
  EXPECT_EQ(bash.exit_code, 0);
  EXPECT_NE(bash.out.find("complete -F _summonctl summonctl\n"),
            std::string::npos);
  EXPECT_NE(
      bash.out.find("    session) words=\"open list get export renew close\" ;;"),
      std::string::npos)
      << bash.out;
  EXPECT_NE(bash.out.find("\"session close\") words=\"--abort --force\" ;;"),
            std::string::npos);
  EXPECT_EQ(Run({"completion", "fish"}).exit_code, 3);
  EXPECT_EQ(
      Run({"completion", "zsh"}).out.rfind("autoload -U +X bashcompinit", 0),
      0u);
}

// `help NOUN VERB` lists every flag of the verb, and the global ones, each
// with a sentence.
TEST_F(SummonctlTest, HelpNounVerbListsEveryFlagWithASentence) {
  for (const CommandSpec& command : SummonctlCommands()) {
    const SummonctlResult help =
        Run({"help", std::string(command.noun), std::string(command.verb)});
    ASSERT_EQ(help.exit_code, 0);
    std::vector<FlagSpec> flags = command.flags;
    flags.insert(flags.end(), SummonctlGlobalFlags().begin(),
                 SummonctlGlobalFlags().end());
    for (const FlagSpec& flag : flags) {
      EXPECT_GT(flag.help.size(), 10u) << flag.name;
      std::string line = absl::StrCat("\n  --", flag.name);
      if (!flag.value_name.empty())
        absl::StrAppend(&line, " ", flag.value_name);
      const size_t at = help.out.find(line + " ");
      ASSERT_NE(at, std::string::npos)
          << command.noun << " " << command.verb << " --" << flag.name;
      const size_t end = help.out.find('\n', at + 1);
      EXPECT_NE(help.out.substr(at, end - at).find(std::string(flag.help)),
                std::string::npos)
          << flag.name;
    }
  }
}

TEST_F(SummonctlTest, ShortOutputFlagYamlAndStructuredErrors) {
  v1::ListModelsResponse models;
  models.add_models()->set_name("gpt");
  summon().SetResponse("ListModels", models);
  const SummonctlResult yaml = Run({"-o", "yaml", "model", "list"});
  EXPECT_EQ(yaml.exit_code, 0);
  EXPECT_EQ(yaml.out.substr(0, 39),
            "\"models\":\n  -\n    \"name\": \"gpt\"\n    \"st");
  summon().SetError("DescribeModel", grpc::Status(grpc::StatusCode::NOT_FOUND,
                                                  "model 'x' does not exist"));
  const SummonctlResult json = Run({"model", "describe", "x", "-o", "json"});
  EXPECT_EQ(json.exit_code, 5);
  EXPECT_EQ(json.err,
            "{\n  \"error\": {\n    \"code\": \"NOT_FOUND\",\n    "
            "\"codeNumber\": 5,\n    \"message\": \"model 'x' does not "
            "exist\"\n  }\n}\n");
  const SummonctlResult errors_yaml =
      Run({"--output=yaml", "model", "describe", "x"});
  EXPECT_EQ(errors_yaml.err,
            "\"error\":\n  \"code\": \"NOT_FOUND\"\n  \"codeNumber\": 5\n  "
            "\"message\": \"model 'x' does not exist\"\n");
  EXPECT_EQ(Run({"-o", "xml", "model", "list"}).exit_code, 3);
}

TEST_F(SummonctlTest, ServerErrorsExitWithTheGrpcCode) {
  summon().SetError(
      "DescribeModel",
      grpc::Status(grpc::StatusCode::NOT_FOUND, "model 'gpt' does not exist"));
  const SummonctlResult result = Run({"model", "describe", "gpt"});
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
  const SummonctlResult result = Run({"--output", "json", "model", "list"});
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
  const SummonctlResult table =
      Run({"session", "open", "gpt", "--scope", "layers", "--no-recurse"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_EQ(table.out, "s-9\n");
  EXPECT_EQ(table.err, "warning: layers is not a unit: no parameters\n");

  const SummonctlResult json = Run({"session", "open", "gpt", "--output=json"});
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

TEST_F(SummonctlTest, SessionOpenDefaultsLeaveOptionsUnsetButTheLease) {
  ASSERT_EQ(Run({"session", "open", "gpt"}).exit_code, 0);
  const v1::SessionOptions options =
      summon().LastRequest<v1::OpenSessionRequest>("OpenSession").options();
  EXPECT_EQ(options.scope_case(), v1::SessionOptions::SCOPE_NOT_SET);
  EXPECT_FALSE(options.has_writeback());
  EXPECT_FALSE(options.has_home_rank());
  // summonctl does not renew: its sessions last 10 minutes unless --lease.
  EXPECT_EQ(options.lease_seconds(), kCliSessionLeaseSeconds);
  EXPECT_EQ(kCliSessionLeaseSeconds, 600u);
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
  // --abort writes nothing back, --force overwrites at writeback: together
  // they are a usage error (exit 3) and nothing is sent.
  const SummonctlResult both =
      Run({"session", "close", "s-1", "--abort", "--force"});
  EXPECT_EQ(both.exit_code, 3);
  EXPECT_EQ(both.err.substr(0, 69),
            "ERROR INVALID_ARGUMENT: flags --abort and --force contradict each "
            "oth");
  EXPECT_EQ(summon().Count("CloseSession"), 0);
  ASSERT_EQ(Run({"session", "close", "s-1", "--abort"}).exit_code, 0);
  const auto close =
      summon().LastRequest<v1::CloseSessionRequest>("CloseSession");
  EXPECT_EQ(close.session_id(), "s-1");
  EXPECT_TRUE(close.abort());
  EXPECT_FALSE(close.force());

  v1::Session renewed;
  renewed.set_id("s-1");
  summon().SetResponse("RenewSession", renewed);
  const SummonctlResult renew = Run({"session", "renew", "s-1"});
  EXPECT_EQ(renew.exit_code, 0);
  EXPECT_NE(renew.out.find("\ns-1 "), std::string::npos) << renew.out;
  EXPECT_FALSE(summon()
                   .LastRequest<v1::RenewSessionRequest>("RenewSession")
                   .has_lease_seconds());

  ASSERT_EQ(Run({"session", "get", "s-7"}).exit_code, 0);
  EXPECT_EQ(
      summon().LastRequest<v1::GetSessionRequest>("GetSession").session_id(),
      "s-7");
}

TEST_F(SummonctlTest, SessionRenewLeaseSetsTheNewLeaseLength) {
  ASSERT_EQ(Run({"session", "renew", "s-1", "--lease", "600"}).exit_code, 0);
  const auto request =
      summon().LastRequest<v1::RenewSessionRequest>("RenewSession");
  EXPECT_EQ(request.session_id(), "s-1");
  ASSERT_TRUE(request.has_lease_seconds());
  EXPECT_EQ(request.lease_seconds(), 600u);

  const SummonctlResult bad = Run({"session", "renew", "s-1", "--lease", "1m"});
  EXPECT_EQ(bad.exit_code, 3);
  EXPECT_EQ(bad.err,
            "ERROR INVALID_ARGUMENT: --lease: '1m' is not a valid number\n");
  EXPECT_EQ(summon().Count("RenewSession"), 1);
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

  const SummonctlResult missing =
      Run({"model", "create", "gpt", "--layout", TempPath("none.json")});
  EXPECT_EQ(missing.exit_code, 66);  // A local file: sysexits' EX_NOINPUT.
  EXPECT_EQ(summon().Count("CreateModel"), 1);
}

TEST_F(SummonctlTest, ModelCreateGradInitFillsTheGradients) {
  const std::string layout = TempPath("grads.json");
  std::ofstream(layout) << "{}";
  ASSERT_EQ(Run({"model", "create", "gpt", "--layout", layout, "--grad-ranks",
                 "all", "--grad-init", "seeded:11"})
                .exit_code,
            0);
  auto request = summon().LastRequest<v1::CreateModelRequest>("CreateModel");
  ASSERT_TRUE(request.has_grads());
  EXPECT_EQ(request.grads().ranks_size(), 0);
  EXPECT_EQ(request.grads().init().seeded().seed(), 11u);
  EXPECT_EQ(request.init().method_case(), v1::InitMethod::METHOD_NOT_SET);

  ASSERT_EQ(Run({"model", "create", "gpt", "--layout", layout, "--grad-ranks",
                 "1", "--grad-init", "zeros"})
                .exit_code,
            0);
  request = summon().LastRequest<v1::CreateModelRequest>("CreateModel");
  EXPECT_TRUE(request.grads().init().has_zeros());

  ASSERT_EQ(
      Run({"model", "create", "gpt", "--layout", layout, "--grad-ranks", "1"})
          .exit_code,
      0);
  request = summon().LastRequest<v1::CreateModelRequest>("CreateModel");
  EXPECT_EQ(request.grads().init().method_case(),
            v1::InitMethod::METHOD_NOT_SET);
}

TEST_F(SummonctlTest, ModelCreateGradInitWithoutGradRanksIsAUsageError) {
  const std::string layout = TempPath("nograds.json");
  std::ofstream(layout) << "{}";
  const SummonctlResult result = Run({"model", "create", "gpt", "--layout",
                                      layout, "--grad-init", "seeded:11"});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err,
            "ERROR INVALID_ARGUMENT: flag --grad-init needs --grad-ranks\n"
            "usage: summonctl model create M --layout FILE.json [--strategy S] "
            "[--init zeros|seeded:SEED|external] [--grad-ranks R,R|all] "
            "[--grad-init zeros|seeded:SEED]\n");

  const SummonctlResult bad = Run({"model", "create", "gpt", "--layout", layout,
                                   "--grad-ranks", "0", "--grad-init", "ones"});
  EXPECT_EQ(bad.exit_code, 3);
  EXPECT_EQ(bad.err,
            "ERROR INVALID_ARGUMENT: --grad-init: 'ones' is none of 'zeros', "
            "'seeded:SEED' and 'external'\n");
  EXPECT_EQ(summon().Count("CreateModel"), 0);
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

  EXPECT_FALSE(request.create().has_use_orig_params());

  ASSERT_EQ(Run({"model", "load", "gpt", "--from", "/ckpt"}).exit_code, 0);
  request = summon().LastRequest<v1::LoadModelRequest>("LoadModel");
  EXPECT_FALSE(request.has_create());
  ASSERT_EQ(Run({"model", "checksum", "gpt"}).exit_code, 0);
}

TEST_F(SummonctlTest, ModelLoadNoOrigParamsCreatesWithoutAlignment) {
  ASSERT_EQ(Run({"model", "load", "gpt", "--from", "/ckpt", "--no-orig-params"})
                .exit_code,
            0);
  const auto request = summon().LastRequest<v1::LoadModelRequest>("LoadModel");
  ASSERT_TRUE(request.has_create());
  ASSERT_TRUE(request.create().has_use_orig_params());
  EXPECT_FALSE(request.create().use_orig_params());
  EXPECT_EQ(request.create().unit_prefixes_size(), 0);
  EXPECT_EQ(request.create().strategy(), v1::SHARDING_STRATEGY_UNSPECIFIED);
}

TEST_F(SummonctlTest, ModelSaveSendsThePathAndTheFileCap) {
  ASSERT_EQ(Run({"model", "save", "gpt", "--to", "ckpt/gpt", "--max-file-bytes",
                 "8589934592"})
                .exit_code,
            0);
  auto request = summon().LastRequest<v1::SaveModelRequest>("SaveModel");
  EXPECT_EQ(request.model(), "gpt");
  EXPECT_EQ(request.path(), "ckpt/gpt");
  EXPECT_EQ(request.max_file_bytes(), 8589934592u);

  ASSERT_EQ(Run({"model", "save", "gpt", "--to", "out.safetensors"}).exit_code,
            0);
  request = summon().LastRequest<v1::SaveModelRequest>("SaveModel");
  EXPECT_EQ(request.path(), "out.safetensors");
  EXPECT_EQ(request.max_file_bytes(), 0u);

  const SummonctlResult bad =
      Run({"model", "save", "gpt", "--to", "d", "--max-file-bytes", "-1"});
  EXPECT_EQ(bad.exit_code, 3);
  EXPECT_EQ(bad.err,
            "ERROR INVALID_ARGUMENT: --max-file-bytes: '-1' is not a valid "
            "number\n");
  EXPECT_EQ(summon().Count("SaveModel"), 2);
}

TEST_F(SummonctlTest, TrainerPhaseReportsThePhase) {
  v1::ReportPhaseResponse reply;
  reply.set_previous_phase(v1::TRAINING_PHASE_IDLE);
  reply.set_phase(v1::TRAINING_PHASE_FORWARD);
  reply.set_step(12);
  server_.trainer().calls().SetResponse("ReportPhase", reply);
  const SummonctlResult result = Run({"trainer", "phase", "gpt", "3", "forward",
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
TEST_F(SummonctlTest, SessionListAllShowsWhoHoldsEachSessionAndItsLease) {
  v1::ListSessionsResponse sessions;
  v1::Session* held = sessions.add_sessions();
  held->set_id("s-9");
  held->set_model("gpt");
  held->set_owner("bob");
  held->set_state(v1::SESSION_STATE_OPEN);
  held->set_created_at_unix_ms(1'700'000'000'000);
  // 125.5 s from now: two whole minutes left whatever the run's speed.
  held->set_expires_at_unix_ms(absl::ToUnixMillis(absl::Now()) + 125'500);
  summon().SetResponse("ListSessions", sessions);

  const SummonctlResult all = Run({"session", "list", "--all", "gpt"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const auto request =
      summon().LastRequest<v1::ListSessionsRequest>("ListSessions");
  EXPECT_TRUE(request.all());
  EXPECT_EQ(request.model(), "gpt");
  EXPECT_EQ(all.out,
            "ID   MODEL  OWNER  SINCE                     LEASE_LEFT  STATE  "
            "SCOPE   BYTES\n"
            "s-9  gpt    bob    2023-11-14T22:13:20.000Z  2m          OPEN   "
            "<root>  0\n");

  ASSERT_EQ(Run({"session", "list"}).exit_code, 0);
  EXPECT_FALSE(
      summon().LastRequest<v1::ListSessionsRequest>("ListSessions").all());
}

TEST_F(SummonctlTest, LeaseZeroIsRefusedNamingTheFlagBeforeAnyCall) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"session", "open", "m", "--lease", "0"},
           {"session", "renew", "s-1", "--lease", "0"}}) {
    const SummonctlResult result = Run(args);
    EXPECT_EQ(result.exit_code, 3) << result.err;
    EXPECT_EQ(result.err,
              "ERROR INVALID_ARGUMENT: --lease: must be at least 1 second (at "
              "most 86400)\n");
  }
  EXPECT_EQ(summon().Count("OpenSession"), 0);
  EXPECT_EQ(summon().Count("RenewSession"), 0);
}

TEST_F(SummonctlTest, DashHAfterAVerbPrintsThatVerbsHelp) {
  const std::string verb_help = Run({"help", "session", "close"}).out;
  ASSERT_EQ(verb_help.rfind("summonctl session close ID", 0), 0u) << verb_help;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"session", "close", "-h"},
           {"session", "close", "s-1", "--help"},
           {"--output", "json", "session", "close", "-h"}}) {
    const SummonctlResult result = Run(args);
    EXPECT_EQ(result.exit_code, 0) << ::testing::PrintToString(args);
    EXPECT_EQ(result.out, verb_help) << ::testing::PrintToString(args);
  }
  EXPECT_EQ(Run({"trainer", "-h"}).out, Run({"help", "trainer"}).out);
  EXPECT_EQ(Run({"-h"}).out.rfind("usage: summonctl [--server ADDR]", 0), 0u);
  EXPECT_EQ(Run({"sesion", "-h"}).exit_code, 3);
  EXPECT_EQ(summon().Count("CloseSession"), 0);
}

}  // namespace summon::client
