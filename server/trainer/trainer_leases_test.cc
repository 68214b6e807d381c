#include "server/trainer/trainer_leases.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "", "params": [{"fqn": "w", "shape": [8], "dtype": "float32"}]}]})";

// Two ranks on one node, an injected clock, no reaper thread: every lapse
// happens when the test calls ReapLapsed.
class TrainerLeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/leases-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    data_dir_ = pattern;
    registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
        data_dir_, InstanceForDataDir(data_dir_), core::Topology{1, 2}, 0});
    ASSERT_TRUE(registry_->Create("m", kLayout, std::nullopt, {}, {}, {}).ok());
    StartLeases();
  }
  void TearDown() override {
    if (watched_ >= 0) close(watched_);
    leases_.reset();
    registry_->Remove("m").IgnoreError();
    registry_.reset();
    std::filesystem::remove_all(data_dir_);
  }
  void StartLeases() {
    TrainerLeases::Options options;
    options.data_dir = data_dir_;
    options.clock = [this] { return now_; };
    options.reap_interval = absl::ZeroDuration();
    leases_ = std::make_unique<TrainerLeases>(registry_.get(), options);
  }
  void SetPhase(int rank, core::TrainingPhase phase) {
    ModelEntry& model = **registry_->Get("m");
    absl::MutexLock lock(&model.runtime_mu);
    model.runtime.phase_per_rank[rank] = phase;
  }
  // A new daemon: the registry re-attaches the model, the leases recover.
  void Restart() {
    leases_.reset();
    registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
        data_dir_, InstanceForDataDir(data_dir_), core::Topology{1, 2}, 0});
    ASSERT_TRUE(registry_->Recover().ok());
    StartLeases();
    ASSERT_TRUE(leases_->Recover().ok());
  }
  // trainers.json's text, and whether a rename replaced the file since the
  // last call (the inode the last call opened has no name left; inode
  // numbers alone can be reused).
  std::pair<bool, std::string> LeasesFile() {
    const std::string path = data_dir_ + "/trainers.json";
    bool replaced = false;
    if (watched_ >= 0) {
      struct stat status;
      EXPECT_EQ(fstat(watched_, &status), 0);
      replaced = status.st_nlink == 0;
      close(watched_);
    }
    watched_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(watched_, 0);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return {replaced, text.str()};
  }
  core::TrainingPhase PhaseOf(int rank) {
    ModelEntry& model = **registry_->Get("m");
    absl::MutexLock lock(&model.runtime_mu);
    return model.runtime.phase_per_rank[rank];
  }

  std::string data_dir_;
  int watched_ = -1;  // LeasesFile's
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<TrainerLeases> leases_;
};

TEST_F(TrainerLeasesTest, R17_LapseReturnsRanksToIdleAndRecordsWhy) {
  auto attached = leases_->Attach("m", {0, 1}, "t-1", absl::Seconds(3));
  ASSERT_TRUE(attached.ok()) << attached.status();
  SetPhase(0, core::TrainingPhase::kForward);
  now_ += absl::Seconds(2);
  ASSERT_TRUE(leases_->CheckAndRenew("m", 0, attached->lease.id).ok());
  now_ += absl::Seconds(2);  // 4 s after attach, 2 s after the renewal.
  EXPECT_EQ(leases_->ReapLapsed(), 0);
  EXPECT_EQ(PhaseOf(0), core::TrainingPhase::kForward);
  now_ += absl::Seconds(1);
  EXPECT_EQ(leases_->ReapLapsed(), 1);
  EXPECT_EQ(PhaseOf(0), core::TrainingPhase::kIdle);
  EXPECT_EQ(leases_->AttachmentOf("m", 0),
            std::make_pair(std::string(""),
                           std::string("lease of trainer 't-1' lapsed (no "
                                       "heartbeat for 3s) in FORWARD; rank "
                                       "returned to IDLE")));
  EXPECT_EQ(leases_->Heartbeat(attached->lease.id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto next = leases_->Attach("m", {0, 1}, "t-2", absl::Seconds(3));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->previous_incarnation, "t-1");
}

TEST_F(TrainerLeasesTest, R17_LeasesAndPhasesSurviveARestart) {
  auto attached = leases_->Attach("m", {1}, "t-1", absl::Seconds(5));
  ASSERT_TRUE(attached.ok());
  SetPhase(1, core::TrainingPhase::kBackward);
  leases_->Persist();
  // A new daemon: the registry re-attaches, the leases come back.
  leases_.reset();
  registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
      data_dir_, InstanceForDataDir(data_dir_), core::Topology{1, 2}, 0});
  ASSERT_TRUE(registry_->Recover().ok());
  StartLeases();
  ASSERT_TRUE(leases_->Recover().ok());
  EXPECT_EQ(PhaseOf(1), core::TrainingPhase::kBackward);
  EXPECT_EQ(leases_->AttachmentOf("m", 1).first, "t-1");
  // Its lease restarted at recovery: it lapses 5 s later, not before.
  now_ += absl::Seconds(4);
  EXPECT_EQ(leases_->ReapLapsed(), 0);
  auto resumed = leases_->Attach("m", {1}, "t-1", absl::Seconds(5));
  ASSERT_TRUE(resumed.ok());
  EXPECT_TRUE(resumed->resumed);
  EXPECT_EQ(resumed->lease.id, attached->lease.id);
}

TEST_F(TrainerLeasesTest, R17_RevokeEndsLeasesWithTheReason) {
  auto attached = leases_->Attach("m", {0}, "t-1", std::nullopt);
  ASSERT_TRUE(attached.ok());
  EXPECT_EQ(attached->lease.ttl, absl::Seconds(10));
  EXPECT_EQ(leases_->AttachedTrainers("m"), std::vector<std::string>{"t-1"});
  leases_->Revoke("m", "model deleted with force by 'root'");
  EXPECT_TRUE(leases_->AttachedTrainers("m").empty());
  const absl::Status ended = leases_->CheckAndRenew("m", 0, attached->lease.id);
  EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ended.message().find("model deleted with force by 'root'"),
            absl::string_view::npos)
      << ended;
  EXPECT_EQ(leases_->Attach("m", {0}, "t", absl::Hours(2)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every phase report persists: a record of up to a page overwrites the file
// in place (no rename, which took up to 60 ms on a busy disk), padded with
// spaces when it shrank; a longer one is written by rename, and the next
// short one, after one more rename shrinks the file, in place again. A
// restart reads each.
TEST_F(TrainerLeasesTest, R17_ShortRecordsOverwriteTheFileInPlace) {
  auto attached = leases_->Attach("m", {1}, "t-1", absl::Seconds(5));
  ASSERT_TRUE(attached.ok());
  SetPhase(1, core::TrainingPhase::kBackward);
  leases_->Persist();
  const std::string backward = LeasesFile().second;
  SetPhase(1, core::TrainingPhase::kForward);  // one character shorter
  leases_->Persist();
  const auto [replaced, forward] = LeasesFile();
  EXPECT_FALSE(replaced);
  ASSERT_EQ(forward.size(), backward.size());
  EXPECT_EQ(forward.back(), ' ');
  EXPECT_NE(forward.find(R"(["IDLE","FORWARD"])"), std::string::npos) << forward;
  Restart();
  EXPECT_EQ(PhaseOf(1), core::TrainingPhase::kForward);
  EXPECT_EQ(leases_->AttachmentOf("m", 1).first, "t-1");

  // An incarnation of 4200 characters: more than a page, in the lease and
  // then in rank 0's last event, until the next attach on rank 0.
  const std::string long_name(4200, 'x');
  ASSERT_TRUE(leases_->Detach(attached->lease.id).ok());
  LeasesFile();
  auto long_lease = leases_->Attach("m", {0}, long_name, absl::Seconds(5));
  ASSERT_TRUE(long_lease.ok());
  const auto [long_replaced, long_text] = LeasesFile();
  EXPECT_TRUE(long_replaced);
  EXPECT_GT(long_text.size(), 4200u);
  ASSERT_TRUE(leases_->Detach(long_lease->lease.id).ok());
  const auto [detach_replaced, detach_text] = LeasesFile();
  EXPECT_TRUE(detach_replaced);
  EXPECT_GT(detach_text.size(), 4200u);
  auto short_lease = leases_->Attach("m", {0}, "t-2", absl::Seconds(5));
  ASSERT_TRUE(short_lease.ok());
  const auto [short_replaced, short_text] = LeasesFile();  // shrunk by rename
  EXPECT_TRUE(short_replaced);
  EXPECT_LT(short_text.size(), 4096u);
  SetPhase(0, core::TrainingPhase::kForward);
  leases_->Persist();
  EXPECT_FALSE(LeasesFile().first);
  Restart();
  EXPECT_EQ(PhaseOf(0), core::TrainingPhase::kForward);
  EXPECT_EQ(leases_->AttachmentOf("m", 0).first, "t-2");
}

// R24: the interlock of a model is unknown while a trainer may have moved
// its ranks unheard (half its lease without a word, a restart, or the
// trainer saying so); each rank is known again when it is reported.
TEST_F(TrainerLeasesTest, R24_PhasesUnknownUntilReportedAgain) {
  auto attached = leases_->Attach("m", {0, 1}, "t-1", absl::Seconds(4));
  ASSERT_TRUE(attached.ok());
  const std::string& id = attached->lease.id;
  EXPECT_TRUE(leases_->CheckInterlockKnown("m").ok());
  now_ += absl::Seconds(2);  // Exactly half: still heard from.
  EXPECT_EQ(leases_->ReapLapsed(), 0);
  EXPECT_TRUE(leases_->CheckInterlockKnown("m").ok());
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(leases_->ReapLapsed(), 0);
  const absl::Status unknown = leases_->CheckInterlockKnown("m");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(unknown.message(),
            "the training interlock of model 'm' is unknown: trainer 't-1' "
            "has not re-reported the phases of ranks 0,1 (not heard from for "
            "2s); retry when it has (its next phase report or heartbeat)");
  EXPECT_TRUE(leases_->PhasesUnknown(id));
  // A heartbeat alone does not say where the ranks are; reports do.
  ASSERT_TRUE(leases_->Heartbeat(id).ok());
  EXPECT_FALSE(leases_->CheckInterlockKnown("m").ok());
  leases_->PhaseKnown("m", 0);
  EXPECT_FALSE(leases_->CheckInterlockKnown("m").ok());
  leases_->PhaseKnown("m", 1);
  EXPECT_TRUE(leases_->CheckInterlockKnown("m").ok());
  // The trainer says it moved unheard, then that it re-established them.
  ASSERT_TRUE(leases_->Heartbeat(id, /*phases_unknown=*/true).ok());
  EXPECT_EQ(leases_->CheckInterlockKnown("m").code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(leases_->Heartbeat(id, false, /*phases_reestablished=*/true).ok());
  EXPECT_TRUE(leases_->CheckInterlockKnown("m").ok());
  // A restarted daemon does not know what its trainers did meanwhile.
  leases_->Persist();
  leases_.reset();
  StartLeases();
  ASSERT_TRUE(leases_->Recover().ok());
  EXPECT_NE(leases_->CheckInterlockKnown("m").message().find(
                "(summond restarted)"),
            std::string::npos);
  // A lease that ends takes its unknown phases with it.
  ASSERT_TRUE(leases_->Detach(id).ok());
  EXPECT_TRUE(leases_->CheckInterlockKnown("m").ok());
}

}  // namespace
}  // namespace summon::server
