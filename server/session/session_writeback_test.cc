// The writeback at close: edits persist and bump generations, writeback
// false drops them, R7 refuses after a step unless forced, a cancelled close
// writes nothing, rank0_only scatters from the home, gradients go back to
// their owners, padding stays alone, and a restarted registry finds it all.
// The decision log's lost answers: session_decisions_test.cc.

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"
#include "server/testing/session_manager_fixture.h"

namespace summon::server {
namespace {

TEST_F(SessionManagerTest, WritebackPersistsAndBumpsGenerations) {
  Start(4, core::Strategy::kFullShard);
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  auto closed = sessions_->Close(info.id, false, false, "alice");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_TRUE(closed->written_back);
  EXPECT_EQ(closed->bytes_written, (25 + 5) * 4);
  EXPECT_EQ(closed->generations.at("layers.0"), 1u);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Doubled(Seeded("layers.0.w", 25)));
  EXPECT_EQ(Read(check.id, "layers.0.b"), Seeded("layers.0.b", 5));
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
  EXPECT_EQ(check.gathered_generations.at("layers.1"), 0u);
}

TEST_F(SessionManagerTest, WritebackFalseDropsEditsUnderEveryStrategy) {
  for (auto strategy : {core::Strategy::kFullShard, core::Strategy::kNoShard,
                        core::Strategy::kHybridShard}) {
    Start(2, strategy);
    SessionOptions options;
    options.writeback = false;
    SessionInfo info = Open(options);
    WriteAll(info.id, "layers.1.w", Doubled(Seeded("layers.1.w", 35)));
    EXPECT_EQ(Read(info.id, "layers.1.w"), Doubled(Seeded("layers.1.w", 35)));
    ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
    SessionInfo check = Open(options);
    EXPECT_EQ(Read(check.id, "layers.1.w"), Seeded("layers.1.w", 35))
        << core::StrategyName(strategy);
    ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());
    TearDown();
  }
}

TEST_F(SessionManagerTest, R7_WritebackRefusedAfterAStepUnlessForced) {
  Start(2, core::Strategy::kFullShard);
  // "scale" (flat element 40 of the root unit, c = 21) lives on rank 1
  // only, so rank 0 may be mid-step while a session holds it.
  for (auto phase :
       {core::TrainingPhase::kForward, core::TrainingPhase::kBetween,
        core::TrainingPhase::kBackward}) {
    ASSERT_TRUE(sessions_->ReportPhase("m", 0, phase, 1, std::nullopt).ok());
  }
  SessionInfo info = Open(Params({"scale"}));
  WriteAll(info.id, "scale", {2.0f});
  // Rank 0's optimizer step moves every unit's generation.
  ASSERT_TRUE(sessions_
                  ->ReportPhase("m", 0, core::TrainingPhase::kOptimizer, 1,
                                std::nullopt)
                  .ok());
  EXPECT_EQ(sessions_->Close(info.id, false, false, "alice").status().code(),
            absl::StatusCode::kAborted);
  // Still open; force writes back.
  auto forced = sessions_->Close(info.id, false, true, "alice");
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(forced->written_back);
}

// R22: a writable session nothing was written into closes without a
// writeback: no generation or external-write counter moves, and the result
// says why. One written into moves them.
TEST_F(SessionManagerTest, R22_WritebackOnlyWhenWritten) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo unwritten = Open(Scoped("layers.0"));
  EXPECT_EQ(Read(unwritten.id, "layers.0.w"), Seeded("layers.0.w", 25));
  auto closed = sessions_->Close(unwritten.id, false, false, "alice");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_FALSE(closed->written_back);
  EXPECT_EQ(closed->reason, "nothing written");
  EXPECT_EQ(closed->bytes_written, 0);
  EXPECT_TRUE(closed->generations.empty());
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 0u);
  EXPECT_EQ(check.gathered_generations.at("layers.1"), 0u);
  ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());

  SessionInfo written = Open(Scoped("layers.0"));
  WriteAll(written.id, "layers.0.b", Seeded("layers.0.b", 5));
  closed = sessions_->Close(written.id, false, false, "alice");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_TRUE(closed->written_back);
  EXPECT_EQ(closed->reason, "");
  EXPECT_EQ(closed->generations.at("layers.0"), 1u);
  check = Open(read_only);
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
  EXPECT_EQ(check.gathered_generations.at("layers.1"), 0u);
}

TEST_F(SessionManagerTest, CloseCancelledBeforeItsWritebackWritesNothing) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  auto cancelled =
      sessions_->Close(info.id, false, false, "alice", [] { return true; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  auto still = sessions_->Get(info.id, "alice");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->state, core::SessionState::kOpen);
  ASSERT_TRUE(sessions_->Close(info.id, true, false, "alice").ok());
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
}

TEST_F(SessionManagerTest, Rank0OnlyWithWritebackScattersFromTheHome) {
  Start(4, core::Strategy::kFullShard);
  SessionOptions options;
  options.rank0_only = true;
  options.home_rank = 3;
  SessionInfo info = Open(options);
  WriteAll(info.id, "embed.w", Doubled(Seeded("embed.w", 40)));
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  SessionInfo check = Open({});
  EXPECT_EQ(Read(check.id, "embed.w"), Doubled(Seeded("embed.w", 40)));
}

TEST_F(SessionManagerTest, WithGradsAbsentPartialAndWrittenBackToOwners) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.with_grads = true;
  SessionInfo none = Open(options);
  EXPECT_FALSE(none.has_grads);
  EXPECT_EQ(sessions_
                ->Read(none.id, "scale", true, std::nullopt, 0, std::nullopt, 0,
                       "alice",
                       [](int64_t, absl::string_view,
                          const std::shared_ptr<const void>&) { return true; })
                .code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(sessions_->Close(none.id, true, false, "alice").ok());
  TearDown();

  // Only rank 0 has grads: rank 1's slices read as zeros.
  Start(2, core::Strategy::kFullShard, {0});
  SessionInfo partial = Open(options);
  EXPECT_TRUE(partial.has_grads);
  std::vector<float> expected = Seeded("layers.1.w.grad", 35);
  // layers.1: N = 35 + end pad 1 = 36, c = 18: rank 1 owns elements 18..34.
  for (int i = 18; i < 35; ++i) expected[i] = 0;
  EXPECT_EQ(Read(partial.id, "layers.1.w", true), expected);
  WriteAll(partial.id, "layers.1.w", std::vector<float>(35, 1.0f), true);
  ASSERT_TRUE(sessions_->Close(partial.id, false, false, "alice").ok());
  SessionInfo check = Open(options);
  std::vector<float> after(35, 1.0f);
  for (int i = 18; i < 35; ++i) after[i] = 0;  // Rank 1 keeps no grads.
  EXPECT_EQ(Read(check.id, "layers.1.w", true), after);
}

TEST_F(SessionManagerTest, SingletonParamWritebackLeavesPaddingAlone) {
  Start(2, core::Strategy::kFullShard);
  // Root unit: embed.w 40 | scale 1 | end pad 1 -> c = 21; rank 1's shard
  // ends with scale at 19 and padding at 20.
  const uint8_t* rank1 = model_->ParamShard(1, 0);
  float padding_before;
  std::memcpy(&padding_before, rank1 + 20 * 4, 4);
  SessionInfo info = Open(Params({"scale"}));
  WriteAll(info.id, "scale", {3.0f});
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  float scale, padding_after;
  std::memcpy(&scale, rank1 + 19 * 4, 4);
  std::memcpy(&padding_after, rank1 + 20 * 4, 4);
  EXPECT_EQ(scale, 3.0f);
  EXPECT_EQ(padding_after, padding_before);
}

TEST_F(SessionManagerTest, RestartedRegistryReattachesShardsAndGenerations) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "/smt_restart_", getpid());
  const std::string instance = InstanceForDataDir(data_dir);
  {
    ModelRegistry registry(
        ModelRegistry::Options{data_dir, instance, core::Topology{1, 2}, 0});
    SessionManager sessions(&registry, {});
    ASSERT_TRUE(registry
                    .Create("m", kLayout, std::nullopt,
                            {ModelInit::Kind::kSeeded, kSeed}, {}, {})
                    .ok());
    auto info = sessions.Open("m", Scoped("layers.1"), "alice");
    ASSERT_TRUE(info.ok());
    const std::vector<float> twice = Doubled(Seeded("layers.1.w", 35));
    ASSERT_TRUE(
        sessions
            .Write(
                info->id, "layers.1.w", false, core::DType::kFloat32, 0,
                absl::string_view(reinterpret_cast<const char*>(twice.data()),
                                  twice.size() * 4),
                "alice")
            .ok());
    ASSERT_TRUE(sessions.Close(info->id, false, false, "alice").ok());
  }
  ModelRegistry registry(
      ModelRegistry::Options{data_dir, instance, core::Topology{1, 2}, 0});
  ASSERT_TRUE(registry.Recover().ok());
  auto model = registry.Get("m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->store->Generation(2), 1u);
  SessionManager sessions(&registry, {});
  auto info = sessions.Open("m", {}, "alice");
  ASSERT_TRUE(info.ok());
  std::vector<float> values(35);
  ASSERT_TRUE(sessions
                  .Read(info->id, "layers.1.w", false, std::nullopt, 0,
                        std::nullopt, 0, "alice",
                        [&](int64_t offset, absl::string_view bytes,
                            const std::shared_ptr<const void>&) {
                          std::memcpy(values.data() + offset, bytes.data(),
                                      bytes.size());
                          return true;
                        })
                  .ok());
  EXPECT_EQ(values, Doubled(Seeded("layers.1.w", 35)));
  ASSERT_TRUE(sessions.Close(info->id, true, false, "alice").ok());
  (*model)->store->Destroy().IgnoreError();
}

}  // namespace
}  // namespace summon::server
