// Staging that leaves out the ranges a writeback is about to write
// (ShardStore::StagingShard's `overwritten`).

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/shard_store.h"

namespace summon::server {
namespace {

// One unit of 64 float32 elements on one rank: a 256-byte shard.
constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "w", "params": [{"fqn": "w.weight", "shape": [64],
                           "dtype": "float32"}]}]})";
constexpr int64_t kShardBytes = 256;

class StagingTest : public ::testing::Test {
 protected:
  StagingTest() : instance_(absl::StrCat("staging", getpid())) {
    absl::StatusOr<core::ModelSpec> spec =
        core::ParseModelLayout(kLayout, core::Topology{1, 1});
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::unique_ptr<ShardStore>> store =
        ShardStore::CreateOrAttach(instance_, "m", *spec, {0},
                                   AttachMode::kCreate);
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    for (int64_t i = 0; i < kShardBytes; ++i) {
      store_->ParamShard(0, 0)[i] = static_cast<uint8_t>(i);
    }
  }
  ~StagingTest() override {
    store_->Destroy().IgnoreError();
    for (const std::string& name : ShardStore::ListSegments(instance_)) {
      shm_unlink(name.c_str());
    }
  }

  const std::string instance_;
  std::unique_ptr<ShardStore> store_;
};

TEST_F(StagingTest, OverwrittenRangesAreLeftOutOfTheCopyAndTheRestIsCurrent) {
  absl::StatusOr<uint8_t*> staged =
      store_->StagingShard(0, 0, "s", 1, {{16, 32}, {100, 300}});
  ASSERT_TRUE(staged.ok()) << staged.status();
  // The caller writes the left-out ranges; everything else is current.
  std::memset(*staged + 16, 0xEE, 16);
  std::memset(*staged + 100, 0xEE, kShardBytes - 100);
  ASSERT_TRUE(store_->CommitStaging("s").ok());
  const uint8_t* shard = store_->ParamShard(0, 0);
  for (int64_t i = 0; i < kShardBytes; ++i) {
    const bool written = (i >= 16 && i < 32) || i >= 100;
    EXPECT_EQ(shard[i], written ? 0xEE : static_cast<uint8_t>(i)) << i;
  }
}

TEST_F(StagingTest, NoRangesCopiesTheWholeShard) {
  absl::StatusOr<uint8_t*> staged = store_->StagingShard(0, 0, "s", 1);
  ASSERT_TRUE(staged.ok()) << staged.status();
  for (int64_t i = 0; i < kShardBytes; ++i) {
    EXPECT_EQ((*staged)[i], static_cast<uint8_t>(i)) << i;
  }
  EXPECT_TRUE(store_->ClearStaging(0).ok());
}

}  // namespace
}  // namespace summon::server
