// R20 over gRPC: checkpoint loads and saves stay beneath the checkpoint
// root (<data-dir>/checkpoints here), an existing file is replaced only when
// asked, and refusals never echo a probed file's contents.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// A sharded checkpoint inside the root whose index names a file that is a
// symlink to a checkpoint outside every root: the load opens files only
// beneath the roots, so it is refused and the model is not created.
TEST_F(CheckpointPathsTest, R20_IndexedFilesDoNotLeadOutOfTheRoot) {
  StartServer(2);
  CreateSeeded("m");
  ASSERT_TRUE(Save("sharded").ok());
  const fs::path shard =
      Root() / "sharded" / "model-00001-of-00001.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  const fs::path outside = fs::path(data_dir_) / "outside.safetensors";
  fs::rename(shard, outside);
  fs::create_symlink(outside, shard);
  grpc::Status escaped = Load("escaped", "sharded");
  EXPECT_CODE(escaped, PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(escaped.error_message(), "checkpoint root"))
      << escaped.error_message();
  EXPECT_CODE(Load("escaped", "sharded"), PERMISSION_DENIED);
  // The same file moved back beneath the root, through a symlink that stays
  // inside (as a Hugging Face cache's snapshot links into its blobs), loads.
  const fs::path blob = Root() / "blobs" / "shard.safetensors";
  fs::create_directories(blob.parent_path());
  fs::rename(outside, blob);
  fs::remove(shard);
  fs::create_symlink(blob, shard);
  EXPECT_TRUE(Load("inside", "sharded").ok());
}

// A symlink planted at the name a save writes to first (the final name plus
// ".summon-partial") is replaced, never followed: the file it points at
// outside the root keeps its bytes.
TEST_F(CheckpointPathsTest, R20_APlantedTemporaryNameIsNotFollowed) {
  StartServer(2);
  CreateSeeded("m");
  const fs::path precious = fs::path(data_dir_) / "precious.txt";
  std::ofstream(precious) << "precious bytes\n";
  fs::create_symlink(precious, Root() / "m.safetensors.summon-partial");
  fs::create_directories(Root() / "dir");
  fs::create_symlink(precious, Root() / "dir" /
                                   "model-00001-of-00001.safetensors"
                                   ".summon-partial");
  EXPECT_TRUE(Save("m.safetensors").ok());
  EXPECT_TRUE(Save("dir", /*overwrite=*/true).ok());
  std::ifstream in(precious);
  const std::string kept((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "precious bytes\n");
  EXPECT_TRUE(Load("back", "m.safetensors").ok());
  EXPECT_TRUE(Load("back-dir", "dir").ok());
}

// Every refused call has its audit line (docs/operations.md, "Audit log"):
// a load or save refused past the role gate for its path (R20) too, with
// the principal, the RPC, the model and the reason, never the file's
// contents.
TEST_F(CheckpointPathsTest, R20_RefusedPathsAreAuditedWithoutContents) {
  StartServer(2);
  CreateSeeded("m");
  const fs::path secret = fs::path(data_dir_) / "secret.txt";
  std::ofstream(secret) << "password=hunter2\n";
  EXPECT_CODE(Load("leak", secret.string()), PERMISSION_DENIED);
  EXPECT_CODE(Save("/etc/summon-escape.safetensors"), PERMISSION_DENIED);
  std::ifstream file(fs::path(data_dir_) / "audit.log");
  const std::string audit((std::istreambuf_iterator<char>(file)),
                          std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(
      audit, absl::StrCat(R"("action":"LoadModel","bytes":0,"message":)"
                          R"("checkpoint path ')",
                          secret.string(), "' resolves outside")))
      << audit;
  EXPECT_TRUE(absl::StrContains(
      audit, absl::StrCat(R"("model":"leak","principal":"anonymous",)"
                          R"("result":"PERMISSION_DENIED","scope":")",
                          secret.string(), "\"")))
      << audit;
  EXPECT_TRUE(absl::StrContains(
      audit, R"("action":"SaveModel","bytes":0,"message":"checkpoint path )"
             R"('/etc/summon-escape.safetensors' resolves outside)"))
      << audit;
  EXPECT_TRUE(absl::StrContains(
      audit, R"("model":"m","principal":"anonymous",)"
             R"("result":"PERMISSION_DENIED","scope":)"
             R"("/etc/summon-escape.safetensors")"))
      << audit;
  EXPECT_FALSE(absl::StrContains(audit, "hunter2"));
}

}  // namespace
}  // namespace summon::tests
