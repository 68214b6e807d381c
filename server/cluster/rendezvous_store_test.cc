#include "server/cluster/rendezvous_store.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "server/cluster/kv_store.h"

namespace summon::server {
namespace {

// 128 bytes like an NCCL unique id, zeros included.
std::vector<char> UniqueIdBytes() {
  std::vector<char> bytes(128);
  for (int i = 0; i < 128; ++i) bytes[i] = static_cast<char>(255 - 2 * i);
  bytes[0] = '\0';
  return bytes;
}

TEST(RendezvousStoreTest, KeysLiveUnderTheIncarnationPrefix) {
  LocalKvStore kv;
  RendezvousStore store(kv, "epoch-3/", absl::Seconds(1));
  store.set("nccl_unique_id", UniqueIdBytes());

  const std::vector<char> expected = UniqueIdBytes();
  EXPECT_EQ(kv.Get("epoch-3/nccl_unique_id", absl::ZeroDuration()).value_or(""),
            std::string(expected.begin(), expected.end()));
  EXPECT_EQ(kv.Get("nccl_unique_id", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.get("nccl_unique_id"), expected);
}

TEST(RendezvousStoreTest, AnotherIncarnationNeverReadsTheKeys) {
  LocalKvStore kv;
  RendezvousStore old_cluster(kv, "epoch-3/", absl::Seconds(1));
  old_cluster.set("0", {'a', 'd', 'd', 'r'});
  RendezvousStore new_cluster(kv, "epoch-4/", absl::Milliseconds(100));
  try {
    new_cluster.get("0");
    ADD_FAILURE() << "read the key of another incarnation";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("DEADLINE_EXCEEDED"),
              std::string::npos)
        << e.what();
  }
}

TEST(RendezvousStoreTest, WaitThrowsAfterItsTimeout) {
  LocalKvStore kv;
  RendezvousStore store(kv, "p/", absl::Seconds(5));
  const absl::Time start = absl::Now();
  EXPECT_THROW(store.wait({"never"}, std::chrono::milliseconds(100)),
               gloo::IoException);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(RendezvousStoreTest, GetWaitsForALaterSet) {
  LocalKvStore kv;
  RendezvousStore reader(kv, "p/", absl::Seconds(5));
  RendezvousStore writer(kv, "p/", absl::Seconds(5));
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(50));
    writer.set("1", {'x'});
  });
  EXPECT_EQ(reader.get("1"), std::vector<char>{'x'});
  later.join();
  EXPECT_NO_THROW(reader.wait({"1"}));
}

}  // namespace
}  // namespace summon::server
