// Tensor access on open sessions: writes must fit the tensor (R5), reads
// converted to read_dtype, pins on a shared copy's immutable bytes, and a
// stalled reader holding up no other.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "server/session/session_manager.h"
#include "server/testing/session_manager_fixture.h"

namespace summon::server {
namespace {

TEST_F(SessionManagerTest, R5_WritesMustFitTheTensor) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open({});
  const std::string four_bytes(4, '\0');
  EXPECT_EQ(sessions_
                ->Write(info.id, "nope", false, core::DType::kFloat32, 0,
                        four_bytes, "alice")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_
                ->Write(info.id, "scale", false, core::DType::kFloat64, 0,
                        std::string(8, '\0'), "alice")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sessions_
                ->Write(info.id, "scale", false, core::DType::kFloat32, 1,
                        four_bytes, "alice")
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(SessionManagerTest, ReadDtypeConvertsToBFloat16) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.read_dtype = core::DType::kBFloat16;
  SessionInfo info = Open(options);
  std::string bytes;
  ASSERT_TRUE(sessions_
                  ->Read(info.id, "layers.0.b", false, std::nullopt, 1, 3, 0,
                         "alice",
                         [&](int64_t offset, absl::string_view chunk,
                             const std::shared_ptr<const void>&) {
                           EXPECT_EQ(offset, 1);
                           bytes.append(chunk.data(), chunk.size());
                           return true;
                         })
                  .ok());
  ASSERT_EQ(bytes.size(), 6u);
  const std::vector<float> seeded = Seeded("layers.0.b", 5);
  for (int i = 0; i < 3; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    EXPECT_EQ(bits, core::FloatToBFloat16(seeded[i + 1])) << "index " << i;
  }
}

// Only a read-only session's unconverted view of its shared copy comes with
// a pin, and the pin keeps those bytes as they were after the session is
// gone (gRPC may still be sending them): not freed, not reused.
TEST_F(SessionManagerTest, ReadsPinOnlyImmutableBytesWhichOutliveTheSession) {
  Start(2, core::Strategy::kFullShard);
  struct Seen {
    std::shared_ptr<const void> pin;
    absl::string_view bytes;
  };
  const auto read = [&](const std::string& id, const std::string& fqn,
                        std::optional<core::DType> dtype) {
    std::vector<Seen> seen;
    EXPECT_TRUE(sessions_
                    ->Read(id, fqn, false, dtype, 0, std::nullopt, 0, "alice",
                           [&](int64_t, absl::string_view bytes,
                               const std::shared_ptr<const void>& pin) {
                             seen.push_back({pin, bytes});
                             return true;
                           })
                    .ok());
    return seen;
  };
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo viewer = Open(read_only);
  WriteAll(viewer.id, "scale", {5.0f});  // Its own edit: a private copy.
  const std::vector<Seen> shared = read(viewer.id, "layers.1.w", std::nullopt);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_NE(shared[0].pin, nullptr);
  EXPECT_EQ(read(viewer.id, "scale", std::nullopt).at(0).pin, nullptr);
  EXPECT_EQ(read(viewer.id, "layers.1.w", core::DType::kBFloat16).at(0).pin,
            nullptr);
  ASSERT_TRUE(sessions_->Close(viewer.id, false, false, "alice").ok());

  // The same layout again: an unpinned copy's memory would be reused here
  // and overwritten by the write.
  SessionInfo writer = Open({});
  WriteAll(writer.id, "layers.1.w", Doubled(Seeded("layers.1.w", 35)));
  EXPECT_EQ(read(writer.id, "layers.1.w", std::nullopt).at(0).pin, nullptr);
  std::vector<float> pinned(35);
  ASSERT_EQ(shared[0].bytes.size(), 35u * 4);
  std::memcpy(pinned.data(), shared[0].bytes.data(), 35 * 4);
  EXPECT_EQ(pinned, Seeded("layers.1.w", 35));
}

// A reader stalled inside its sink (a slow client) does not hold up another
// read-only session's read of the same shared copy.
TEST_F(SessionManagerTest, AStalledReaderOfASharedCopyBlocksNoOtherReader) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo slow = Open(read_only);
  SessionInfo other = Open(read_only);
  absl::Notification slow_inside;
  absl::Notification other_done;
  std::atomic<bool> slow_left{false};
  std::thread stalled([&] {
    EXPECT_TRUE(sessions_
                    ->Read(slow.id, "layers.1.w", false, std::nullopt, 0,
                           std::nullopt, 0, "alice",
                           [&](int64_t, absl::string_view,
                               const std::shared_ptr<const void>&) {
                             slow_inside.Notify();
                             other_done.WaitForNotificationWithTimeout(
                                 absl::Seconds(5));
                             slow_left = true;
                             return true;
                           })
                    .ok());
  });
  slow_inside.WaitForNotification();
  EXPECT_EQ(Read(other.id, "layers.1.w"), Seeded("layers.1.w", 35));
  // The stalled reader was still inside its sink all along.
  EXPECT_FALSE(slow_left.load());
  other_done.Notify();
  stalled.join();
}

}  // namespace
}  // namespace summon::server
