#include "server/cluster/kv_store.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/testing/kv_store_test_server.h"

namespace summon::server {
namespace {

// What an NCCL unique id looks like to the store: 128 arbitrary bytes,
// zeros and 0xFF included.
std::string UniqueIdBlob() {
  std::string blob(128, '\0');
  for (int i = 0; i < 128; ++i)
    blob[i] = static_cast<char>((i * 37 + 11) % 256);
  blob[5] = '\0';
  blob[77] = '\xff';
  return blob;
}

TEST(LocalKvStoreTest, SetThenGetReturnsTheLatestValue) {
  LocalKvStore store;
  ASSERT_TRUE(store.Set("k", "v1").ok());
  ASSERT_TRUE(store.Set("k", "v2").ok());
  absl::StatusOr<std::string> value = store.Get("k", absl::ZeroDuration());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v2");
}

TEST(LocalKvStoreTest, GetWithZeroTimeoutOnMissingKeyIsNotFound) {
  LocalKvStore store;
  absl::StatusOr<std::string> value = store.Get("absent", absl::ZeroDuration());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kNotFound)
      << value.status();
}

TEST(LocalKvStoreTest, GetWaitsForALaterSet) {
  LocalKvStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("late", "here").ok());
  });
  absl::StatusOr<std::string> value = store.Get("late", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "here");
}

TEST(LocalKvStoreTest, GetTimesOutWithDeadlineExceeded) {
  LocalKvStore store;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value =
      store.Get("never", absl::Milliseconds(100));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded)
      << value.status();
  EXPECT_GE(elapsed, absl::Milliseconds(100));
  EXPECT_LT(elapsed, absl::Seconds(2));
}

TEST(LocalKvStoreTest, WaitReturnsOnceEveryKeyExists) {
  LocalKvStore store;
  ASSERT_TRUE(store.Set("a", "1").ok());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("b", "2").ok());
  });
  const absl::Status waited = store.Wait({"a", "b"}, absl::Seconds(5));
  setter.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(LocalKvStoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  LocalKvStore store;
  ASSERT_TRUE(store.Set("present", "1").ok());
  const absl::Status waited =
      store.Wait({"present", "missing"}, absl::Milliseconds(50));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_NE(waited.message().find("missing"), absl::string_view::npos)
      << waited;
  EXPECT_EQ(waited.message().find("present"), absl::string_view::npos)
      << waited;
}

TEST(LocalKvStoreTest, OneSetWakesEveryConcurrentWaiter) {
  LocalKvStore store;
  constexpr int kWaiters = 8;
  std::vector<absl::StatusOr<std::string>> got(kWaiters,
                                               absl::UnknownError("not run"));
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back(
        [&, i] { got[i] = store.Get("go", absl::Seconds(5)); });
  }
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time set_at = absl::Now();
  ASSERT_TRUE(store.Set("go", "now").ok());
  for (std::thread& waiter : waiters) waiter.join();
  EXPECT_LT(absl::Now() - set_at, absl::Seconds(2));
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(got[i].ok()) << "waiter " << i << ": " << got[i].status();
    EXPECT_EQ(*got[i], "now") << "waiter " << i;
  }
}

TEST(LocalKvStoreTest, CloseReleasesWaitersWithUnavailable) {
  LocalKvStore store;
  absl::Status waited;
  std::thread waiter([&] { waited = store.Wait({"k"}, absl::Seconds(5)); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time closed_at = absl::Now();
  store.Close();
  waiter.join();
  EXPECT_LT(absl::Now() - closed_at, absl::Seconds(2));
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_EQ(store.Set("k", "v").code(), absl::StatusCode::kUnavailable);
}

TEST(LocalKvStoreTest, ErasePrefixDropsOnlyThatIncarnation) {
  LocalKvStore store;
  for (const char* key : {"1/a", "1/b", "10/a", "2/a"}) {
    ASSERT_TRUE(store.Set(key, key).ok());
  }
  EXPECT_EQ(store.ErasePrefix("1/"), 2);
  EXPECT_EQ(store.Get("1/a", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Get("1/b", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Get("10/a", absl::ZeroDuration()).value_or(""), "10/a");
  EXPECT_EQ(store.Get("2/a", absl::ZeroDuration()).value_or(""), "2/a");
}

class RemoteKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<KvStoreTestServer>> started =
        KvStoreTestServer::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    leader_ = *std::move(started);
  }

  std::unique_ptr<KvStoreTestServer> leader_;
};

TEST_F(RemoteKvStoreTest, BinaryBlobRoundTripsBetweenNodes) {
  RemoteKvStore node1(leader_->NewChannel());
  RemoteKvStore node2(leader_->NewChannel());
  const std::string blob = UniqueIdBlob();
  ASSERT_TRUE(node1.Set("inc7/nccl_unique_id", blob).ok());
  absl::StatusOr<std::string> got =
      node2.Get("inc7/nccl_unique_id", absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 128u);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ((*got)[i], blob[i]) << "byte " << i;
  }
  // And it is the leader's store that holds it.
  EXPECT_EQ(leader_->store()
                .Get("inc7/nccl_unique_id", absl::ZeroDuration())
                .value_or(""),
            blob);
}

TEST_F(RemoteKvStoreTest, GetWaitsForASetFromAnotherNode) {
  RemoteKvStore waiter(leader_->NewChannel());
  RemoteKvStore setter(leader_->NewChannel());
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(setter.Set("addr/1", "host:1").ok());
  });
  absl::StatusOr<std::string> got = waiter.Get("addr/1", absl::Seconds(5));
  later.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "host:1");
}

TEST_F(RemoteKvStoreTest, TimeoutsKeepTheirCodesOverTheWire) {
  RemoteKvStore node(leader_->NewChannel());
  EXPECT_EQ(node.Get("absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);

  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = node.Get("absent", absl::Milliseconds(200));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  ASSERT_TRUE(node.Set("here", "1").ok());
  const absl::Status waited =
      node.Wait({"here", "not_here"}, absl::Milliseconds(100));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_NE(waited.message().find("not_here"), absl::string_view::npos)
      << waited;
}

TEST_F(RemoteKvStoreTest, OneSetWakesWaitersOnEveryNode) {
  constexpr int kNodes = 4;
  std::vector<std::unique_ptr<RemoteKvStore>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(std::make_unique<RemoteKvStore>(leader_->NewChannel()));
  }
  std::vector<absl::Status> waited(kNodes, absl::UnknownError("not run"));
  std::vector<std::thread> waiters;
  for (int i = 0; i < kNodes; ++i) {
    waiters.emplace_back([&, i] {
      waited[i] = nodes[i]->Wait({"ready/0", "ready/1"}, absl::Seconds(5));
    });
  }
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(leader_->store().Set("ready/0", "").ok());
  ASSERT_TRUE(nodes[0]->Set("ready/1", "").ok());
  for (std::thread& waiter : waiters) waiter.join();
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_TRUE(waited[i].ok()) << "node " << i << ": " << waited[i];
  }
}

TEST(RemoteKvStoreUnreachableTest, FailsWithinTheRpcTimeout) {
  // Nothing listens on port 1.
  RemoteKvStore node(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  const absl::Status set = node.Set("k", "v");
  EXPECT_EQ(set.code(), absl::StatusCode::kDeadlineExceeded) << set;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace summon::server
