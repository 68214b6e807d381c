#include "core/scope.h"

#include "gtest/gtest.h"

namespace summon::core {
namespace {

// Root unit (embed, final norm, tied head), two block units; "layers" itself
// is a plain container module, "layers.0.attn" a module inside a unit.
constexpr char kLayout[] = R"({
  "strategy": "FULL_SHARD",
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "norm.w", "shape": [4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [4, 4], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [8, 4], "dtype": "float32"}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.attn.w", "shape": [4, 4], "dtype": "float32"}]}
  ]})";

using Fqns = std::vector<std::string>;

class ScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = ParseModelLayout(kLayout, Topology{1, 2});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  std::vector<std::string> Resolve(const ScopeRequest& request) {
    absl::StatusOr<Scope> scope = ResolveScope(model_, request);
    EXPECT_TRUE(scope.ok()) << scope.status();
    std::vector<std::string> fqns;
    if (!scope.ok()) return fqns;
    for (const ScopedParam& param : scope->params) fqns.push_back(param.fqn);
    return fqns;
  }

  ModelSpec model_;
};

TEST_F(ScopeTest, RootRecurseCoversEveryUnitParentFirst) {
  EXPECT_EQ(Resolve({"", true, {}}),
            (Fqns{"embed.w", "norm.w", "layers.0.attn.w", "layers.0.mlp.w",
                  "layers.1.attn.w"}));
}

TEST_F(ScopeTest, RootWithoutRecurseIsOnlyTheRootUnit) {
  EXPECT_EQ(Resolve({"", false, {}}), (Fqns{"embed.w", "norm.w"}));
}

TEST_F(ScopeTest, InnerUnitWithAndWithoutRecurse) {
  EXPECT_EQ(Resolve({"layers.1", true, {}}), (Fqns{"layers.1.attn.w"}));
  EXPECT_EQ(Resolve({"layers.0", false, {}}),
            (Fqns{"layers.0.attn.w", "layers.0.mlp.w"}));
}

TEST_F(ScopeTest, ContainerModuleRecursesIntoItsUnits) {
  EXPECT_EQ(Resolve({"layers", true, {}}),
            (Fqns{"layers.0.attn.w", "layers.0.mlp.w", "layers.1.attn.w"}));
}

TEST_F(ScopeTest, NonUnitModuleGivesEmptyScopeWithWarning) {
  for (const ScopeRequest& request :
       {ScopeRequest{"layers", false, {}},
        ScopeRequest{"layers.0.attn", true, {}},
        ScopeRequest{"layers.0.attn", false, {}}}) {
    absl::StatusOr<Scope> scope = ResolveScope(model_, request);
    ASSERT_TRUE(scope.ok()) << scope.status();
    EXPECT_TRUE(scope->params.empty()) << request.module_fqn;
    ASSERT_EQ(scope->warnings.size(), 1u) << request.module_fqn;
    EXPECT_NE(scope->warnings[0].find(request.module_fqn), std::string::npos);
  }
}

// The warning points where the parameters are (issue 33): the units below
// a container, or the unit a non-unit module's parameters live in and the
// parameter list naming them.
TEST_F(ScopeTest, NonUnitModuleWarningPointsAtTheUnitAndTheParams) {
  const std::pair<ScopeRequest, const char*> cases[] = {
      {{"layers", false, {}},
       "module 'layers' is not a unit (--no-recurse, recurse=false): the "
       "session holds no "
       "parameters; without --no-recurse it holds the units below it "
       "(layers.0, layers.1)"},
      {{"layers.0.attn", true, {}},
       "module 'layers.0.attn' is not a unit and has no unit below it: the "
       "session holds no parameters; its parameters live in --scope "
       "layers.0, or name just them: --params layers.0.attn.w"},
      {{"layers.0.attn", false, {}},
       "module 'layers.0.attn' is not a unit (--no-recurse, recurse=false): "
       "the session holds no parameters; its parameters live in --scope "
       "layers.0, or "
       "name just them: --params layers.0.attn.w"},
  };
  for (const auto& [request, warning] : cases) {
    absl::StatusOr<Scope> scope = ResolveScope(model_, request);
    ASSERT_TRUE(scope.ok()) << scope.status();
    EXPECT_EQ(scope->warnings, std::vector<std::string>{warning});
  }
}

TEST_F(ScopeTest, ExplicitParamsResolveAliasesDeduplicateAndSortGlobally) {
  absl::StatusOr<Scope> scope = ResolveScope(
      model_, {"", true, {"layers.1.attn.w", "head.w", "embed.w"}});
  ASSERT_TRUE(scope.ok()) << scope.status();
  ASSERT_EQ(scope->params.size(), 2u);
  EXPECT_EQ(scope->params[0].fqn, "embed.w");
  EXPECT_EQ(scope->params[1].fqn, "layers.1.attn.w");
  EXPECT_EQ(scope->units, (std::vector<int>{0, 2}));
}

TEST_F(ScopeTest, R11_UnknownModuleOrParameterIsNotFound) {
  absl::StatusOr<Scope> module = ResolveScope(model_, {"layers.7", true, {}});
  EXPECT_EQ(module.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(module.status().message().find("layers.7"), std::string::npos);
  absl::StatusOr<Scope> param = ResolveScope(model_, {"", true, {"nope.w"}});
  EXPECT_EQ(param.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(param.status().message().find("nope.w"), std::string::npos);
}

TEST_F(ScopeTest, MixingModuleAndParamsOrNamingAParamAsModuleIsInvalid) {
  EXPECT_EQ(ResolveScope(model_, {"layers.0", true, {"embed.w"}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveScope(model_, {"embed.w", true, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::core
