#include "client/cli/cli_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace summon::client {
namespace {

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* const kFlags = new std::vector<FlagSpec>{
      {"server", "ADDR", false, "", ""},
      {"verbose", "", false, "", ""},
  };
  return *kFlags;
}

const std::vector<CommandSpec>& Commands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      {"box", "list", {}, "OWNER", false, {}, nullptr},
      {"box",
       "copy",
       {"FROM", "TO"},
       "",
       false,
       {{"out", "FILE", true, "", ""},
        {"deep", "", false, "", ""},
        {"depth", "N", false, "", ""}},
       nullptr},
      {"lid",
       "stat",
       {"ID"},
       "NAME",
       true,
       {{"bins", "N", false, "", ""}, {"scale", "S", false, "bins", ""}},
       nullptr},
  };
  return *kCommands;
}

absl::StatusOr<Invocation> Parse(const std::vector<std::string>& args) {
  return ParseCommandLine(args, "tool", GlobalFlags(), Commands());
}

// The error's first line (the problem; a usage text follows).
std::string Problem(const std::vector<std::string>& args) {
  absl::StatusOr<Invocation> parsed = Parse(args);
  EXPECT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(parsed.status().message());
  return message.substr(0, message.find('\n'));
}

std::string UsageAfterProblem(const std::vector<std::string>& args) {
  const std::string message(Parse(args).status().message());
  const size_t newline = message.find('\n');
  return newline == std::string::npos ? "" : message.substr(newline + 1);
}

TEST(CliParserTest, ParsesNounVerbPositionalsAndFlags) {
  absl::StatusOr<Invocation> parsed =
      Parse({"--server", "h:1", "box", "copy", "a", "b", "--out=f.npy",
             "--deep", "--depth", "3"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_NE(parsed->command, nullptr);
  EXPECT_EQ(parsed->command, &Commands()[1]);
  EXPECT_EQ(parsed->positionals, std::vector<std::string>({"a", "b"}));
  EXPECT_EQ(parsed->Value("server"), "h:1");
  EXPECT_EQ(parsed->Value("out"), "f.npy");
  EXPECT_EQ(parsed->Value("depth"), "3");
  EXPECT_TRUE(parsed->Has("deep"));
  EXPECT_EQ(parsed->Get("deep"), std::optional<std::string>(""));
  EXPECT_FALSE(parsed->Has("verbose"));
  EXPECT_EQ(parsed->Get("verbose"), std::nullopt);
  EXPECT_EQ(parsed->Value("verbose"), "");
}

TEST(CliParserTest, GlobalFlagsAreAcceptedAnywhere) {
  absl::StatusOr<Invocation> parsed =
      Parse({"box", "--verbose", "copy", "a", "--out", "o", "b", "--server=x"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Has("verbose"));
  EXPECT_EQ(parsed->Value("server"), "x");
  EXPECT_EQ(parsed->positionals, std::vector<std::string>({"a", "b"}));
}

TEST(CliParserTest, FlagValuesMayLookLikeAnything) {
  absl::StatusOr<Invocation> parsed =
      Parse({"box", "copy", "a", "b", "--out", "--deep", "--depth=-1=2"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Value("out"), "--deep");
  EXPECT_FALSE(parsed->Has("deep"));
  EXPECT_EQ(parsed->Value("depth"), "-1=2");
}

TEST(CliParserTest, HelpAnywhereAsksForUsage) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"box", "--help"}, {"box", "copy", "--help"}}) {
    absl::StatusOr<Invocation> parsed = Parse(args);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->command, nullptr);
  }
}

TEST(CliParserTest, OptionalPositionals) {
  absl::StatusOr<Invocation> none = Parse({"box", "list"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->OptionalPositionals().empty());
  absl::StatusOr<Invocation> one = Parse({"box", "list", "ann"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->OptionalPositionals(), std::vector<std::string>({"ann"}));
  EXPECT_EQ(Problem({"box", "list", "ann", "bob"}),
            "unexpected argument 'bob'");

  absl::StatusOr<Invocation> many = Parse({"lid", "stat", "7", "x", "y", "z"});
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(many->positionals[0], "7");
  EXPECT_EQ(many->OptionalPositionals(),
            std::vector<std::string>({"x", "y", "z"}));
}

TEST(CliParserTest, StructuralErrorsNameTheProblem) {
  EXPECT_EQ(Problem({}), "missing NOUN");
  EXPECT_EQ(Problem({"--verbose"}), "missing NOUN");
  EXPECT_EQ(Problem({"jar"}), "unknown noun 'jar'");
  EXPECT_EQ(Problem({"box"}), "missing VERB after 'box'");
  EXPECT_EQ(Problem({"box", "open"}), "unknown verb 'open' for 'box'");
  EXPECT_EQ(Problem({"box", "copy", "--out", "o"}), "missing argument FROM");
  EXPECT_EQ(Problem({"box", "copy", "a", "--out", "o"}), "missing argument TO");
  EXPECT_EQ(Problem({"box", "copy", "a", "b", "c", "--out", "o"}),
            "unexpected argument 'c'");
  EXPECT_EQ(Problem({"box", "copy", "a", "b"}), "missing flag --out FILE");
}

TEST(CliParserTest, FlagErrorsNameTheFlag) {
  EXPECT_EQ(Problem({"box", "copy", "a", "b", "--out", "o", "--shallow"}),
            "unknown flag --shallow");
  // A command's flag is known only after its verb.
  EXPECT_EQ(Problem({"box", "--deep", "copy", "a", "b", "--out", "o"}),
            "unknown flag --deep");
  EXPECT_EQ(Problem({"box", "copy", "a", "b", "--out", "o", "--deep=yes"}),
            "flag --deep takes no value");
  EXPECT_EQ(Problem({"box", "copy", "a", "b", "--out"}),
            "flag --out needs a value FILE");
  EXPECT_EQ(Problem({"box", "copy", "a", "b", "--out", "o", "--out", "p"}),
            "flag --out given twice");
  EXPECT_EQ(Problem({"--server", "a", "--server=b", "box", "list"}),
            "flag --server given twice");
}

TEST(CliParserTest, AFlagOnlyWithAnotherNeedsIt) {
  EXPECT_EQ(Problem({"lid", "stat", "7", "--scale", "log"}),
            "flag --scale needs --bins");
  EXPECT_EQ(UsageAfterProblem({"lid", "stat", "7", "--scale", "log"}),
            "usage: tool lid stat ID [NAME...] [--bins N] [--scale S]");
  absl::StatusOr<Invocation> both =
      Parse({"lid", "stat", "7", "--scale=log", "--bins", "4"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->Value("scale"), "log");
  absl::StatusOr<Invocation> neither = Parse({"lid", "stat", "7"});
  ASSERT_TRUE(neither.ok()) << neither.status();
}

TEST(CliParserTest, ErrorsEndWithTheMostSpecificUsage) {
  EXPECT_EQ(UsageAfterProblem({"box", "copy", "a"}),
            "usage: tool box copy FROM TO --out FILE [--deep] [--depth N]");
  EXPECT_EQ(UsageAfterProblem({"box", "open"}),
            "usage: tool [--server ADDR] [--verbose] NOUN VERB ...\n"
            "  tool box list [OWNER]\n"
            "  tool box copy FROM TO --out FILE [--deep] [--depth N]");
  EXPECT_EQ(UsageAfterProblem({"jar"}),
            "usage: " + Usage("tool", GlobalFlags(), Commands()));
}

TEST(CliParserTest, UsageListsEveryCommand) {
  EXPECT_EQ(Usage("tool", GlobalFlags(), Commands()),
            "tool [--server ADDR] [--verbose] NOUN VERB ...\n"
            "  tool box list [OWNER]\n"
            "  tool box copy FROM TO --out FILE [--deep] [--depth N]\n"
            "  tool lid stat ID [NAME...] [--bins N] [--scale S]");
}

// The first characters of `text`, as many as `prefix` has.
std::string Head(const std::string& text, const std::string& prefix) {
  return text.substr(0, prefix.size());
}

TEST(CliParserTest, UnknownWordsCloseToKnownOnesGetASuggestion) {
  auto parse = [](std::vector<std::string> args) {
    return ParseCommandLine(args, "tool", GlobalFlags(), Commands()).status();
  };
  EXPECT_EQ(Head(std::string(parse({"bxo", "list"}).message()),
                 "unknown noun 'bxo' (did you mean 'box'?)"),
            "unknown noun 'bxo' (did you mean 'box'?)");
  EXPECT_EQ(Head(std::string(parse({"box", "lsit"}).message()),
                 "unknown verb 'lsit' for 'box' (did you mean 'list'?)"),
            "unknown verb 'lsit' for 'box' (did you mean 'list'?)");
  EXPECT_EQ(Head(std::string(parse({"box", "copy", "a", "b", "--out", "f",
                                    "--depht", "2"})
                                 .message()),
                 "unknown flag --depht (did you mean '--depth'?)"),
            "unknown flag --depht (did you mean '--depth'?)");
  // Nothing within two edits: no suggestion.
  EXPECT_EQ(Head(std::string(parse({"zzzzzz", "list"}).message()),
                 "unknown noun 'zzzzzz'\nusage:"),
            "unknown noun 'zzzzzz'\nusage:");
}

TEST(CliParserTest, ContradictoryFlagsAreAUsageError) {
  const std::vector<CommandSpec> commands = {
      {"tap",
       "run",
       {},
       "",
       false,
       {{"dry", "", false, "", "wet"}, {"wet", "", false, "", ""}},
       nullptr}};
  EXPECT_TRUE(
      ParseCommandLine({"tap", "run", "--dry"}, "tool", GlobalFlags(), commands)
          .ok());
  const absl::Status status = ParseCommandLine({"tap", "run", "--wet", "--dry"},
                                               "tool", GlobalFlags(), commands)
                                  .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()),
            "flags --dry and --wet contradict each other\n"
            "usage: tool tap run [--dry] [--wet]");
}

}  // namespace
}  // namespace summon::client
