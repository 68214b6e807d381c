// R20 over gRPC: checkpoint loads and saves stay beneath the checkpoint
// root (<data-dir>/checkpoints here), an existing file is replaced only when
// asked, and refusals never echo a probed file's contents.

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

namespace fs = std::filesystem;

class CheckpointPathsTest : public SummondTest {
 protected:
  grpc::Status Save(const std::string& path, bool overwrite = false) {
    pb::SaveModelRequest request;
    request.set_model("m");
    request.set_path(path);
    request.set_overwrite(overwrite);
    pb::SaveModelResponse response;
    grpc::ClientContext context;
    return summon_->SaveModel(&context, request, &response);
  }
  grpc::Status Load(const std::string& model, const std::string& path) {
    pb::LoadModelRequest request;
    request.set_model(model);
    request.set_path(path);
    request.mutable_create();
    pb::LoadModelResponse response;
    grpc::ClientContext context;
    return summon_->LoadModel(&context, request, &response);
  }
  fs::path Root() const { return fs::path(data_dir_) / "checkpoints"; }
};

TEST_F(CheckpointPathsTest, R20_SavesStayBeneathTheRoot) {
  StartServer(2);
  CreateSeeded("m");
  ASSERT_TRUE(Save("m.safetensors").ok());
  EXPECT_TRUE(fs::exists(Root() / "m.safetensors"));
  const std::string outside = (fs::path(data_dir_) / "escape.safetensors");
  EXPECT_CODE(Save(outside), PERMISSION_DENIED);
  EXPECT_CODE(Save("../escape.safetensors"), INVALID_ARGUMENT);
  EXPECT_CODE(Save("../../x.safetensors"), INVALID_ARGUMENT);
  fs::create_directory_symlink(data_dir_, Root() / "up");
  EXPECT_CODE(Save("up/escape.safetensors"), PERMISSION_DENIED);
  EXPECT_FALSE(fs::exists(outside));
  EXPECT_FALSE(fs::exists(fs::path(data_dir_) / "x.safetensors"));
}

TEST_F(CheckpointPathsTest, R20_AnExistingFileIsReplacedOnlyWhenAsked) {
  StartServer(2);
  CreateSeeded("m");
  ASSERT_TRUE(Save("m.safetensors").ok());
  const auto size = fs::file_size(Root() / "m.safetensors");
  grpc::Status again = Save("m.safetensors");
  EXPECT_CODE(again, ALREADY_EXISTS);
  EXPECT_TRUE(absl::StrContains(again.error_message(), "overwrite"));
  ASSERT_TRUE(Save("m.safetensors", /*overwrite=*/true).ok());
  EXPECT_EQ(fs::file_size(Root() / "m.safetensors"), size);
  // The directory form checks every file it would write.
  ASSERT_TRUE(Save("dir").ok());
  EXPECT_CODE(Save("dir"), ALREADY_EXISTS);
}

TEST_F(CheckpointPathsTest, R20_ProbesOfOtherFilesLearnNothing) {
  StartServer(2);
  // A secret outside the root: refused before it is opened.
  const fs::path secret = fs::path(data_dir_) / "secret.txt";
  std::ofstream(secret) << "password=hunter2 and more text to make it long\n";
  grpc::Status outside = Load("leak", secret.string());
  EXPECT_CODE(outside, PERMISSION_DENIED);
  EXPECT_FALSE(absl::StrContains(outside.error_message(), "hunter2"));
  EXPECT_CODE(Load("leak", "/etc/passwd"), PERMISSION_DENIED);
  // A text file inside the root: refused as not safetensors, without its
  // first bytes as a number or as text.
  std::ofstream(Root() / "notes.safetensors")
      << "password=hunter2 and more text to make it long\n";
  grpc::Status inside = Load("leak", "notes.safetensors");
  EXPECT_CODE(inside, INVALID_ARGUMENT);
  EXPECT_TRUE(
      absl::StrContains(inside.error_message(), "not a safetensors file"))
      << inside.error_message();
  EXPECT_FALSE(absl::StrContains(inside.error_message(), "hunter2"));
  // "password" as a little-endian number, what the old message printed.
  EXPECT_FALSE(absl::StrContains(inside.error_message(), "8316866959935"))
      << inside.error_message();
}

}  // namespace
}  // namespace summon::tests
