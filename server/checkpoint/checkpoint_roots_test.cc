#include "server/checkpoint/checkpoint_roots.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace summon::server {
namespace {

namespace fs = std::filesystem;

class CheckpointRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/roots-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    base_ = fs::canonical(pattern);
    fs::create_directories(base_ / "ckpt" / "sub");
    fs::create_directories(base_ / "other");
    fs::create_directories(base_ / "outside");
  }
  void TearDown() override { fs::remove_all(base_); }

  fs::path base_;
};

TEST_F(CheckpointRootsTest, R20_RelativePathsResolveBeneathTheFirstRoot) {
  const CheckpointRoots roots({(base_ / "ckpt").string()});
  EXPECT_EQ(roots.Resolve("m.safetensors").value(),
            (base_ / "ckpt" / "m.safetensors").string());
  EXPECT_EQ(roots.Resolve("sub/new-dir").value(),
            (base_ / "ckpt" / "sub" / "new-dir").string());
}

TEST_F(CheckpointRootsTest, R20_AbsolutePathsMustBeBeneathSomeRoot) {
  const CheckpointRoots roots(
      {(base_ / "ckpt").string(), (base_ / "other").string()});
  EXPECT_EQ(roots.Resolve((base_ / "other" / "x.safetensors").string()).value(),
            (base_ / "other" / "x.safetensors").string());
  const absl::StatusOr<std::string> refused = roots.Resolve("/etc/passwd");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("'/etc/passwd'"),
            std::string::npos);
  // A sibling whose name starts like a root is not beneath it.
  EXPECT_EQ(roots.Resolve((base_ / "ckpt-evil" / "x").string()).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CheckpointRootsTest, R20_DotDotIsRefusedWhereverItPoints) {
  const CheckpointRoots roots({(base_ / "ckpt").string()});
  for (const char* path :
       {"../../escape.safetensors", "sub/../m.safetensors", ".."}) {
    const absl::StatusOr<std::string> refused = roots.Resolve(path);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << path;
  }
}

TEST_F(CheckpointRootsTest, R20_SymlinkOutOfTheRootIsRefused) {
  fs::create_directory_symlink(base_ / "outside", base_ / "ckpt" / "link");
  fs::create_symlink("/etc/passwd", base_ / "ckpt" / "passwd.safetensors");
  const CheckpointRoots roots({(base_ / "ckpt").string()});
  EXPECT_EQ(roots.Resolve("link/m.safetensors").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(roots.Resolve("passwd.safetensors").status().code(),
            absl::StatusCode::kPermissionDenied);
  // A symlink that stays inside is followed.
  fs::create_directory_symlink(base_ / "ckpt" / "sub", base_ / "ckpt" / "in");
  EXPECT_EQ(roots.Resolve("in/m.safetensors").value(),
            (base_ / "ckpt" / "sub" / "m.safetensors").string());
}

TEST_F(CheckpointRootsTest, R20_NoRootOrNoPathIsRefused) {
  EXPECT_EQ(CheckpointRoots({}).Resolve("m.safetensors").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      CheckpointRoots({(base_ / "ckpt").string()}).Resolve("").status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace summon::server
