#include "client/files/npz.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace summon::client {
namespace {

uint32_t Le32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(bytes[at + i]);
  }
  return value;
}

TEST(Crc32Test, MatchesTheCheckValueAndContinues) {
  EXPECT_EQ(Crc32(0, "123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(Crc32(0, "1234"), "56789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(0, ""), 0u);
}

TEST(NpzWriterTest, WritesMembersADataDescriptorAndTheDirectory) {
  std::string archive;
  NpzWriter npz([&](absl::string_view bytes) {
    archive.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(npz.Begin("a").ok());
  ASSERT_TRUE(npz.Write("1234").ok());
  ASSERT_TRUE(npz.Write("56789").ok());
  ASSERT_TRUE(npz.Begin("b.c").ok());
  ASSERT_TRUE(npz.Finish().ok());
  // Member a: 30-byte local header + "a.npy", 9 bytes, a 16-byte descriptor.
  EXPECT_EQ(Le32(archive, 0), 0x04034b50u);
  EXPECT_EQ(archive.substr(30, 5), "a.npy");
  EXPECT_EQ(archive.substr(35, 9), "123456789");
  EXPECT_EQ(Le32(archive, 44), 0x08074b50u);
  EXPECT_EQ(Le32(archive, 48), 0xCBF43926u);
  EXPECT_EQ(Le32(archive, 52), 9u);
  // Member b.c starts at 60; the directory after its 30 + 7 + 0 + 16 bytes.
  EXPECT_EQ(archive.substr(90, 7), "b.c.npy");
  const size_t directory = 60 + 30 + 7 + 16;
  EXPECT_EQ(Le32(archive, directory), 0x02014b50u);
  // The end record: two members, the directory's size and offset.
  const size_t end = archive.size() - 22;
  EXPECT_EQ(Le32(archive, end), 0x06054b50u);
  EXPECT_EQ(Le32(archive, end + 12), end - directory);
  EXPECT_EQ(Le32(archive, end + 16), directory);
  EXPECT_EQ(static_cast<uint8_t>(archive[end + 10]), 2);
}

TEST(NpzWriterTest, RefusesMoreMembersThanZipHolds) {
  NpzWriter npz([](absl::string_view) { return absl::OkStatus(); });
  for (int i = 0; i < 65535; ++i) ASSERT_TRUE(npz.Begin("m").ok());
  const absl::Status refused = npz.Begin("m");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("export as safetensors"), std::string::npos);
}

}  // namespace
}  // namespace summon::client
