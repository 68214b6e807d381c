// `tensor read --out`: what summonctl does to the file the user named. A
// regular file is replaced through a temporary name in its directory; a
// symlink's target is written and the link kept; a FIFO (or any file that is
// not a regular one) is written through in place, never replaced, unlinked
// or given a `.part` beside it; an unwritable place is a clear local error
// (exit 73, printed as CANTCREAT).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/files/npy.h"
#include "client/testing/fifo_reader.h"
#include "client/testing/summonctl_test_fixture.h"
#include "client/testing/without_dac_override.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

namespace fs = std::filesystem;

const std::string& TwoFloats() {
  static const std::string* const kData =
      new std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  return *kData;
}

std::string FreshDirectory(const std::string& name) {
  const std::string dir = TempPath(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Contents(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

class SummonctlOutputTest : public SummonctlTest {
 protected:
  void SetUp() override {
    server_.summon().SetTensor(TensorOf("w", v1::DTYPE_FLOAT32, {2}),
                               TwoFloats());
  }

  // The .npy bytes `tensor read` writes for the tensor.
  static std::string ExpectedNpy() {
    absl::StatusOr<std::string> npy =
        EncodeNpy({core::DType::kFloat32, {2}, TwoFloats()});
    EXPECT_TRUE(npy.ok());
    return npy.ok() ? *npy : "";
  }
};

TEST_F(SummonctlOutputTest, RegularFileIsReplacedWithNothingLeftBeside) {
  const std::string dir = FreshDirectory("regular");
  const std::string path = dir + "/w.npy";
  std::ofstream(path) << "an older file";
  const SummonctlResult result =
      Run({"tensor", "read", "s-1", "w", "--out", path});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(Contents(path), ExpectedNpy());
  EXPECT_EQ(Names(dir), std::vector<std::string>{"w.npy"});
}

TEST_F(SummonctlOutputTest, FifoWithAReaderIsWrittenThroughAndKept) {
  const std::string dir = FreshDirectory("fifo");
  const std::string path = dir + "/pipe";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const int reader = OpenFifoReader(path);
  ASSERT_GE(reader, 0);
  const SummonctlResult result =
      Run({"tensor", "read", "s-1", "w", "--out", path});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(Drain(reader), ExpectedNpy());
  EXPECT_TRUE(fs::is_fifo(path));
  EXPECT_EQ(Names(dir), std::vector<std::string>{"pipe"});
}

TEST_F(SummonctlOutputTest, SymlinkTargetIsWrittenAndTheLinkKept) {
  const std::string dir = FreshDirectory("symlink");
  fs::create_directories(dir + "/store");
  std::ofstream(dir + "/store/w.npy") << "old";
  fs::create_symlink("store/w.npy", dir + "/link.npy");
  const SummonctlResult result =
      Run({"tensor", "read", "s-1", "w", "--out", dir + "/link.npy"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(fs::is_symlink(dir + "/link.npy"));
  EXPECT_EQ(Contents(dir + "/store/w.npy"), ExpectedNpy());
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"link.npy", "store"}));
  EXPECT_EQ(Names(dir + "/store"), std::vector<std::string>{"w.npy"});
}

TEST_F(SummonctlOutputTest, UnwritablePlacesAreLocalErrorsWithTheirExitCode) {
  const std::string dir = FreshDirectory("unwritable");
  std::ofstream(dir + "/file") << "x";
  const SummonctlResult below_file =
      Run({"tensor", "read", "s-1", "w", "--out", dir + "/file/w.npy"});
  EXPECT_EQ(below_file.exit_code, 73);
  EXPECT_EQ(below_file.err, "ERROR CANTCREAT: cannot create " + dir +
                                "/file/w.npy: Not a directory\n");
  const SummonctlResult json = Run(
      {"-o", "json", "tensor", "read", "s-1", "w", "--out", dir + "/file/w"});
  EXPECT_NE(json.err.find("\"code\": \"CANTCREAT\",\n    \"codeNumber\": 73"),
            std::string::npos)
      << json.err;
  // A read-only directory. Root writes into one through CAP_DAC_OVERRIDE,
  // so this thread (summonctl's command runs on it) sets that capability
  // aside for the check: it runs as root (CI) as for any other user.
  fs::create_directories(dir + "/ro");
  ::chmod((dir + "/ro").c_str(), 0555);
  const SummonctlResult read_only = testing::WithoutDacOverride([&] {
    return Run({"tensor", "read", "s-1", "w", "--out", dir + "/ro/w.npy"});
  });
  EXPECT_EQ(read_only.exit_code, 73);
  EXPECT_EQ(read_only.err, "ERROR CANTCREAT: cannot create " + dir +
                               "/ro/w.npy: Permission denied\n");
  EXPECT_TRUE(Names(dir + "/ro").empty());
  ::chmod((dir + "/ro").c_str(), 0755);
}

TEST_F(SummonctlOutputTest, LocalInputErrorsPrintTheNameOfTheirExitCode) {
  const SummonctlResult missing =
      Run({"tensor", "write", "s-1", "w", "--in", TempPath("none.npy")});
  EXPECT_EQ(missing.exit_code, 66);
  EXPECT_EQ(missing.err, "ERROR NOINPUT: cannot open " + TempPath("none.npy") +
                             ": No such file or directory\n");
  const std::string garbage = TempPath("garbage.npy");
  std::ofstream(garbage) << "not an npy file";
  const SummonctlResult malformed =
      Run({"tensor", "write", "s-1", "w", "--in", garbage});
  EXPECT_EQ(malformed.exit_code, 65);
  EXPECT_EQ(malformed.err.rfind("ERROR DATAERR: " + garbage + ": ", 0), 0u)
      << malformed.err;
}

}  // namespace
}  // namespace summon::client
