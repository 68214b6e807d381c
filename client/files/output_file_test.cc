#include "client/files/output_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "client/testing/fifo_reader.h"
#include "client/testing/without_dac_override.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TEST_TMPDIR for each test.
std::string FreshDirectory(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(root != nullptr ? root : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Contents(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The names in `dir`, sorted, joined by spaces.
std::string Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& name : names)
    joined += (joined.empty() ? "" : " ") + name;
  return joined;
}

TEST(OutputFileTest, RegularFileIsReplacedThroughATemporaryName) {
  const std::string dir = FreshDirectory("regular");
  const std::string path = dir + "/w.npy";
  std::ofstream(path) << "old";
  ::chmod(path.c_str(), 0640);
  absl::StatusOr<OutputFile> file = OutputFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->in_place());
  ASSERT_TRUE(file->Write("new bytes").ok());
  // Until the commit the old file is whole.
  EXPECT_EQ(Contents(path), "old");
  ASSERT_TRUE(file->Commit().ok());
  EXPECT_EQ(Contents(path), "new bytes");
  EXPECT_EQ(Listing(dir), "w.npy");
  struct stat info;
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
}

TEST(OutputFileTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string dir = FreshDirectory("abandoned");
  const std::string path = dir + "/w.npy";
  std::ofstream(path) << "old";
  {
    absl::StatusOr<OutputFile> file = OutputFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(file->Write("half").ok());
  }  // Never committed.
  EXPECT_EQ(Contents(path), "old");
  EXPECT_EQ(Listing(dir), "w.npy");
}

TEST(OutputFileTest, SymlinkTargetIsWrittenAndTheLinkKept) {
  const std::string dir = FreshDirectory("symlink");
  fs::create_directories(dir + "/data");
  fs::create_directories(dir + "/links");
  std::ofstream(dir + "/data/real.npy") << "old";
  fs::create_symlink("../data/real.npy", dir + "/links/w.npy");
  ASSERT_TRUE(WriteOutputFile(dir + "/links/w.npy", "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/links/w.npy"));
  EXPECT_EQ(fs::read_symlink(dir + "/links/w.npy"), "../data/real.npy");
  EXPECT_EQ(Contents(dir + "/data/real.npy"), "new");
  EXPECT_EQ(Listing(dir + "/links"), "w.npy");
  EXPECT_EQ(Listing(dir + "/data"), "real.npy");
  // A link to a name that does not exist yet creates the target.
  fs::create_symlink("../data/fresh.npy", dir + "/links/fresh.npy");
  ASSERT_TRUE(WriteOutputFile(dir + "/links/fresh.npy", "fresh").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/links/fresh.npy"));
  EXPECT_EQ(Contents(dir + "/data/fresh.npy"), "fresh");
}

TEST(OutputFileTest, FifoIsWrittenThroughAndStaysAFifo) {
  const std::string dir = FreshDirectory("fifo");
  const std::string path = dir + "/pipe";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const int reader = OpenFifoReader(path);
  ASSERT_GE(reader, 0);
  {
    absl::StatusOr<OutputFile> file = OutputFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_TRUE(file->in_place());
    ASSERT_TRUE(file->Write("through the pipe").ok());
    ASSERT_TRUE(file->Commit().ok());
  }
  EXPECT_EQ(Drain(reader), "through the pipe");
  EXPECT_TRUE(fs::is_fifo(path));
  EXPECT_EQ(Listing(dir), "pipe");
}

TEST(OutputFileTest, SymlinkToAFifoWritesTheFifo) {
  const std::string dir = FreshDirectory("fifo_link");
  ASSERT_EQ(::mkfifo((dir + "/pipe").c_str(), 0600), 0);
  fs::create_symlink("pipe", dir + "/link");
  const int reader = OpenFifoReader(dir + "/pipe");
  ASSERT_GE(reader, 0);
  EXPECT_TRUE(WriteOutputFile(dir + "/link", "via link").ok());
  EXPECT_EQ(Drain(reader), "via link");
  EXPECT_TRUE(fs::is_fifo(dir + "/pipe"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link"));
  EXPECT_EQ(Listing(dir), "link pipe");
}

TEST(OutputFileTest, UnixSocketIsWrittenThroughAndKept) {
  // sun_path holds 108 bytes: $TEST_TMPDIR is too deep for it.
  char dir_template[] = "/tmp/summon-output-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/sock";
  // Non-blocking: the connection waits in the backlog until accepted after
  // the write, and a test that fails (no connection) cannot hang.
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(
      ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  ASSERT_EQ(::listen(listener, 1), 0);
  EXPECT_TRUE(WriteOutputFile(path, "to a socket").ok());
  std::string received;
  const int peer = ::accept(listener, nullptr, nullptr);
  if (peer >= 0) {
    char buffer[64];
    for (ssize_t n; (n = ::read(peer, buffer, sizeof(buffer))) > 0;) {
      received.append(buffer, static_cast<size_t>(n));
    }
    ::close(peer);
  }
  ::close(listener);
  EXPECT_EQ(received, "to a socket");
  EXPECT_TRUE(fs::is_socket(path));
  EXPECT_EQ(Listing(dir), "sock");
  fs::remove_all(dir);
}

TEST(OutputFileTest, UnwritableDirectoriesAreClearErrors) {
  const std::string dir = FreshDirectory("unwritable");
  // A directory as the output.
  absl::StatusOr<OutputFile> directory = OutputFile::Open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("cannot write " + dir),
            std::string::npos)
      << directory.status();
  // A "directory" that is a file: fails whoever runs the test.
  std::ofstream(dir + "/file") << "x";
  absl::StatusOr<OutputFile> below_file = OutputFile::Open(dir + "/file/w.npy");
  ASSERT_FALSE(below_file.ok());
  EXPECT_EQ(below_file.status().message(),
            "cannot create " + dir + "/file/w.npy: Not a directory");
  // A read-only directory. Root writes into one through CAP_DAC_OVERRIDE,
  // so this thread sets that capability aside for the check (capabilities
  // are per thread): it runs as root (CI) as for any other user.
  fs::create_directories(dir + "/ro");
  ::chmod((dir + "/ro").c_str(), 0555);
  absl::StatusOr<OutputFile> read_only = testing::WithoutDacOverride(
      [&] { return OutputFile::Open(dir + "/ro/w.npy"); });
  ASSERT_FALSE(read_only.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(read_only.status()));
  EXPECT_EQ(read_only.status().message(),
            "cannot create " + dir + "/ro/w.npy: Permission denied");
  EXPECT_EQ(Listing(dir + "/ro"), "");
  ::chmod((dir + "/ro").c_str(), 0755);
}

}  // namespace
}  // namespace summon::client
