#ifndef SUMMON_SERVER_TESTING_SESSION_MANAGER_FIXTURE_H_
#define SUMMON_SERVER_TESTING_SESSION_MANAGER_FIXTURE_H_

// The fixture shared by the session manager's tests (server/session/
// session_*_test.cc): a single-node SessionManager over its own registry
// with one small model ("m", seeded init), an injected clock, and helpers
// to open, read and write whole tensors as float32.

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"

namespace summon::server {

class SessionManagerTest : public ::testing::Test {
 protected:
  // Root unit (embed + tied head), two block units, one singleton
  // parameter.
  static constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "", "params": [
    {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
    {"fqn": "head.w", "alias_of": "embed.w"},
    {"fqn": "scale", "shape": [1], "dtype": "float32"}]},
  {"fqn": "layers.0", "params": [
    {"fqn": "layers.0.w", "shape": [5, 5], "dtype": "float32"},
    {"fqn": "layers.0.b", "shape": [5], "dtype": "float32"}]},
  {"fqn": "layers.1", "params": [
    {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";

  static constexpr uint64_t kSeed = 7;

  static SessionOptions Scoped(const std::string& module) {
    SessionOptions options;
    options.scope.module_fqn = module;
    return options;
  }

  static SessionOptions Params(std::vector<std::string> params) {
    SessionOptions options;
    options.scope.params = std::move(params);
    return options;
  }

  // The values of the seeded init (kSeed) of `fqn`'s first `numel`.
  static std::vector<float> Seeded(const std::string& fqn, int64_t numel) {
    std::vector<float> values(numel);
    EXPECT_TRUE(core::FillSeeded(fqn, kSeed, core::DType::kFloat32, 0, numel,
                                 values.data())
                    .ok());
    return values;
  }

  void Start(int local_ranks, std::optional<core::Strategy> strategy,
             std::vector<int> grad_ranks = {}, int64_t budget = 0,
             int max_sessions = 64, Coordinator* coordinator = nullptr) {
    static int counter = 0;
    sessions_.reset();
    registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
        "", absl::StrCat("smt", getpid(), "x", ++counter),
        core::Topology{1, local_ranks}, 0});
    SessionManager::Options options;
    options.memory_budget_bytes = budget;
    options.max_sessions_per_principal = max_sessions;
    options.admins = {"root"};
    options.clock = [this] { return now_; };
    options.coordinator = coordinator;
    sessions_ = std::make_unique<SessionManager>(registry_.get(), options);
    ModelInit seeded{ModelInit::Kind::kSeeded, kSeed};
    auto model =
        registry_->Create("m", kLayout, strategy, seeded, grad_ranks, seeded);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
  }

  // The model of Start() under a new manager over `ops` (a test's own
  // NodeOps, on a runtime the test keeps alive), with this fixture's clock.
  void UseNodeOps(NodeOps* ops) {
    SessionManager::Options options;
    options.node_ops = ops;
    options.clock = [this] { return now_; };
    sessions_ = std::make_unique<SessionManager>(registry_.get(), options);
  }

  void TearDown() override {
    sessions_.reset();
    if (model_) model_->store->Destroy().IgnoreError();
  }

  SessionInfo Open(SessionOptions options, const std::string& who = "alice") {
    auto info = sessions_->Open("m", options, who);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(SessionInfo{});
  }

  std::vector<float> Read(const std::string& id, const std::string& fqn,
                          bool grad = false) {
    std::vector<float> values;
    absl::Status status = sessions_->Read(
        id, fqn, grad, core::DType::kFloat32, 0, std::nullopt, 0, "alice",
        [&](int64_t, absl::string_view bytes,
            const std::shared_ptr<const void>&) {
          const size_t old = values.size();
          values.resize(old + bytes.size() / 4);
          std::memcpy(values.data() + old, bytes.data(), bytes.size());
          return true;
        });
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }

  void WriteAll(const std::string& id, const std::string& fqn,
                const std::vector<float>& values, bool grad = false,
                const std::string& who = "alice") {
    auto written = sessions_->Write(
        id, fqn, grad, core::DType::kFloat32, 0,
        absl::string_view(reinterpret_cast<const char*>(values.data()),
                          values.size() * 4),
        who);
    ASSERT_TRUE(written.ok()) << written.status();
  }

  static std::vector<float> Doubled(std::vector<float> values) {
    for (float& v : values) v *= 2;
    return values;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<SessionManager> sessions_;
  std::shared_ptr<ModelEntry> model_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_SESSION_MANAGER_FIXTURE_H_
