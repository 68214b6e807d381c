// Session scopes end to end: recurse true/false on the root, an inner unit
// with a child unit and modules that are not units; explicit parameter
// lists; the singleton parameter whose second rank holds only padding.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

// "layers.0" is a unit with a child unit "layers.0.mlp"; "layers" and
// "layers.0.attn" are modules that are not units.
constexpr char kNestedLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "", "params": [
    {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"}]},
  {"fqn": "layers.0", "params": [
    {"fqn": "layers.0.attn.w", "shape": [5, 5], "dtype": "float32"},
    {"fqn": "layers.0.attn.b", "shape": [5], "dtype": "float32"}]},
  {"fqn": "layers.0.mlp", "params": [
    {"fqn": "layers.0.mlp.w", "shape": [3, 5], "dtype": "float32"}]},
  {"fqn": "layers.1", "params": [
    {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";

int64_t NumelOf(const std::string& fqn) {
  for (const auto& [name, numel] : kBlocksParams) {
    if (name == fqn) return numel;
  }
  ADD_FAILURE() << "unknown parameter " << fqn;
  return 0;
}

std::vector<std::string> Fqns(
    const google::protobuf::RepeatedPtrField<pb::TensorInfo>& tensors) {
  std::vector<std::string> fqns;
  for (const pb::TensorInfo& tensor : tensors) fqns.push_back(tensor.fqn());
  return fqns;
}

std::vector<std::string> GatheredUnits(const pb::Session& session) {
  std::vector<std::string> units;
  for (const pb::UnitGeneration& unit : session.gathered_generations()) {
    units.push_back(unit.unit());
  }
  return units;
}

struct RecurseCase {
  std::string module;
  bool recurse;
  std::vector<std::string> params;  // Expected, model order.
  std::vector<std::string> units;   // Expected gathered units.
};

class ScopeTest : public SummondTest {};

TEST_F(ScopeTest, RecurseSelectsTheUnitAndOptionallyEveryUnitBelowIt) {
  StartServer(4);
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kNestedLayout);
  const std::vector<RecurseCase> cases = {
      {"",
       true,
       {"embed.w", "layers.0.attn.w", "layers.0.attn.b", "layers.0.mlp.w",
        "layers.1.w"},
       {"", "layers.0", "layers.0.mlp", "layers.1"}},
      {"", false, {"embed.w"}, {""}},
      {"layers.0",
       true,
       {"layers.0.attn.w", "layers.0.attn.b", "layers.0.mlp.w"},
       {"layers.0", "layers.0.mlp"}},
      {"layers.0", false, {"layers.0.attn.w", "layers.0.attn.b"}, {"layers.0"}},
      {"layers.0.mlp", false, {"layers.0.mlp.w"}, {"layers.0.mlp"}},
      {"layers",
       true,
       {"layers.0.attn.w", "layers.0.attn.b", "layers.0.mlp.w", "layers.1.w"},
       {"layers.0", "layers.0.mlp", "layers.1"}},
  };
  for (const RecurseCase& test : cases) {
    SCOPED_TRACE("module '" + test.module + "' recurse " +
                 (test.recurse ? "true" : "false"));
    const pb::Session session =
        Open("m", ReadOnly(ModuleScope(test.module, test.recurse)));
    EXPECT_EQ(Fqns(session.params()), test.params);
    EXPECT_EQ(GatheredUnits(session), test.units);
    EXPECT_TRUE(session.warnings().empty());
    std::vector<int64_t> numels;
    for (const std::string& fqn : test.params) {
      numels.push_back(NumelOf(fqn));
      EXPECT_EQ(Read(session.id(), fqn), Seeded(fqn, NumelOf(fqn))) << fqn;
    }
    EXPECT_EQ(session.bytes(), SessionBufferBytes(numels));
    Close(session.id());
  }
}

TEST_F(ScopeTest, RecurseFalseOnAUnitLeavesItsChildUnitFreeForAWriter) {
  StartServer(4);
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kNestedLayout);
  const pb::Session outer = Open("m", ModuleScope("layers.0", false));
  const pb::Session inner = Open("m", ModuleScope("layers.0.mlp"));
  pb::Session refused;
  EXPECT_CODE(TryOpen("m", ModuleScope("layers.0", true), &refused),
              FAILED_PRECONDITION);
  Close(inner.id());
  Close(outer.id());
}

TEST_F(ScopeTest, ModuleThatIsNotAUnitGivesAnEmptySessionWithAWarning) {
  StartServer(4);
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kNestedLayout);
  for (const auto& [module, recurse] :
       std::vector<std::pair<std::string, bool>>{{"layers.0.attn", false},
                                                 {"layers.0.attn", true},
                                                 {"layers", false}}) {
    SCOPED_TRACE(module + (recurse ? " recurse" : " no-recurse"));
    const pb::Session session = Open("m", ModuleScope(module, recurse));
    EXPECT_EQ(session.params_size(), 0);
    EXPECT_EQ(session.gathered_generations_size(), 0);
    EXPECT_EQ(session.bytes(), 0);
    ASSERT_EQ(session.warnings_size(), 1);
    EXPECT_NE(session.warnings(0).find(module), std::string::npos)
        << session.warnings(0);
    pb::ReadTensorRequest read;
    read.set_session_id(session.id());
    read.set_fqn("layers.0.attn.w");
    std::string data;
    EXPECT_CODE(ReadRaw(read, &data), NOT_FOUND);
    Close(session.id());
  }
  // Nothing was written back: no unit's generation moved.
  const pb::Model model = Describe("m");
  for (const pb::Unit& unit : model.units()) {
    EXPECT_EQ(unit.generation(), 0u) << unit.fqn();
  }
}

TEST_F(ScopeTest, ParameterListGathersOnlyItsTensorsAndWritesOnlyThem) {
  StartServer(4);
  const pb::Model model = CreateSeeded("m");
  // An alias names its primary; the list comes back in model order.
  const pb::Session session = Open("m", ParamScope({"layers.1.w", "head.w"}));
  EXPECT_EQ(Fqns(session.params()),
            (std::vector<std::string>{"embed.w", "layers.1.w"}));
  EXPECT_EQ(GatheredUnits(session), (std::vector<std::string>{"", "layers.1"}));
  EXPECT_EQ(session.bytes(), SessionBufferBytes({40, 35}));
  EXPECT_EQ(session.options().params().fqns_size(), 2);
  EXPECT_EQ(Read(session.id(), "head.w"), Seeded("embed.w", 40));
  for (const char* outside : {"norm.w", "layers.0.attn.w"}) {
    pb::ReadTensorRequest read;
    read.set_session_id(session.id());
    read.set_fqn(outside);
    std::string data;
    EXPECT_CODE(ReadRaw(read, &data), NOT_FOUND);
    EXPECT_CODE(WriteFloats(session.id(), outside, {1.0f}), NOT_FOUND);
  }
  TensorValues expected = SeededBlocks();
  expected["layers.1.w"] = Scaled(expected["layers.1.w"], 0.5f);
  ASSERT_TRUE(
      WriteFloats(session.id(), "layers.1.w", expected["layers.1.w"]).ok());
  const pb::CloseSessionResponse closed = Close(session.id());
  // Only the listed tensors' slices are written, never their units' others.
  EXPECT_EQ(closed.bytes_written(), (40 + 35) * 4);
  EXPECT_EQ(ParamChecksums(Checksum("m")), ExpectedChecksums(model, expected));
  const pb::Model after = Describe("m");
  for (const pb::Unit& unit : after.units()) {
    EXPECT_EQ(unit.generation(), unit.fqn() == "layers.0" ? 0u : 1u)
        << unit.fqn();
  }
}

// A one-element parameter alone in its unit: over 2 ranks its second rank's
// shard is pure padding (end padding with use_orig_params, per-rank padding
// without), which a writeback must never touch.
TEST_F(ScopeTest, SingletonParameterWritebackLeavesThePaddingRankUntouched) {
  for (const bool use_orig_params : {true, false}) {
    SCOPED_TRACE(use_orig_params ? "use_orig_params" : "flat params");
    StartServer(2);
    const std::string layout = std::string(R"({"use_orig_params": )") +
                               (use_orig_params ? "true" : "false") +
                               R"(, "units": [
      {"fqn": "", "params": [
        {"fqn": "scale", "shape": [1], "dtype": "float32"}]},
      {"fqn": "block", "params": [
        {"fqn": "block.w", "shape": [3, 3], "dtype": "float32"}]}]})";
    const pb::Model model =
        CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, layout);
    ASSERT_EQ(model.units_size(), 2);
    EXPECT_EQ(model.units(0).chunk_numel(), 1);
    EXPECT_EQ(model.units(0).unpadded_numel(), use_orig_params ? 2 : 1);
    TensorValues values = {{"scale", Seeded("scale", 1)},
                           {"block.w", Seeded("block.w", 9)}};
    const ChecksumMap before = ParamChecksums(Checksum("m"));
    ASSERT_EQ(before, ExpectedChecksums(model, values));

    const pb::Session session = Open("m", ModuleScope("", false));
    ASSERT_EQ(session.params_size(), 1);
    EXPECT_EQ(session.params(0).numel(), 1);
    EXPECT_EQ(Read(session.id(), "scale"), values["scale"]);
    values["scale"] = {3.25f};
    ASSERT_TRUE(WriteFloats(session.id(), "scale", {3.25f}).ok());
    // Only rank 0's one real element is written.
    EXPECT_EQ(Close(session.id()).bytes_written(), 4);

    const ChecksumMap after = ParamChecksums(Checksum("m"));
    EXPECT_EQ(after, ExpectedChecksums(model, values));
    EXPECT_NE(after.at({0, ""}), before.at({0, ""}));
    for (const auto& key : {std::make_pair(1, std::string("")),
                            std::make_pair(0, std::string("block")),
                            std::make_pair(1, std::string("block"))}) {
      EXPECT_EQ(after.at(key), before.at(key)) << key.first << key.second;
    }
    const pb::Session check = Open("m", ReadOnly());
    EXPECT_EQ(Read(check.id(), "scale"), std::vector<float>{3.25f});
    EXPECT_EQ(Read(check.id(), "block.w"), values["block.w"]);
    TearDown();
  }
}

}  // namespace
}  // namespace summon::tests
