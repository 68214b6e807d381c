// Every Peer operation the leader sends on a node's state is fenced by the
// cluster epoch (issue 31): a follower of a real 2 x 2 cluster refuses each
// of them from another epoch with FAILED_PRECONDITION naming both epochs,
// and nothing on it changes (the model stays, its checksums and generations
// stay, no model is made, no checkpoint file is written). The same calls in
// the current epoch are answered, and the leader's own fan-out (which
// fills in the epoch) keeps working.

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "summon/v1/peer.grpc.pb.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;
namespace health = ::grpc::health::v1;

constexpr char kEpochPrefix[] = ", the node is in epoch ";

class ClusterFenceTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fence-checkpoints");
    std::filesystem::create_directories(root_);
    LocalCluster::Options options;
    options.nodes = 2;
    options.local_ranks = 2;
    options.checkpoint_root = root_;
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    peer_ = v1::Peer::NewStub(grpc::CreateChannel(
        cluster_->address(1), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (cluster_ == nullptr) return;
    const absl::Status stopped = cluster_->Stop();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(20));
    return context;
  }

  // The follower's epoch, read from its refusal of an epoch it cannot be in
  // (epochs are odd).
  uint64_t FollowerEpoch() {
    v1::NodeAbortRequest request;
    request.set_epoch(2);
    v1::NodeAbortResponse response;
    const grpc::Status status =
        peer_->NodeAbort(Context().get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    const std::string& message = status.error_message();
    const size_t at = message.find(kEpochPrefix);
    uint64_t epoch = 0;
    EXPECT_NE(at, std::string::npos) << message;
    if (at == std::string::npos) return 0;
    EXPECT_TRUE(absl::SimpleHexAtoi(
        message.substr(at + sizeof(kEpochPrefix) - 1), &epoch))
        << message;
    return epoch;
  }

  // The exact refusal of an operation from `stale` on node 1 in `current`.
  static void ExpectFenced(const char* call, const grpc::Status& status,
                           uint64_t stale, uint64_t current) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << call << ": " << status.error_message();
    EXPECT_EQ(status.error_message(),
              absl::StrCat("node 1 is fenced: the operation is from cluster "
                           "epoch ",
                           absl::Hex(stale), kEpochPrefix, absl::Hex(current)))
        << call;
  }

  std::string root_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Peer::Stub> peer_;
};

TEST_F(ClusterFenceTest, AFollowerRefusesEveryNodeOperationOfAnotherEpoch) {
  const client::SummonClient& leader = cluster_->client(0);
  CreateSeeded(leader, "m", kUnevenLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  // A checkpoint of zeros: loading it into "m" would change every shard.
  client::CreateModelParams zeros;
  zeros.name = "src";
  zeros.layout_json = kUnevenLayout;
  ASSERT_TRUE(leader.CreateModel(zeros).ok());
  ASSERT_TRUE(leader.SaveModel("src", "src.safetensors").ok());
  // Through the leader: every node's checksums and generations, gathered
  // by NodeChecksum in the current epoch.
  const v1::ModelChecksumResponse before = ChecksumOk(leader, "m");
  ASSERT_EQ(before.shards_size(), 12);  // 3 units x 4 ranks.

  const uint64_t current = FollowerEpoch();
  ASSERT_NE(current, 0u);
  // Another odd epoch, as a deposed leader's would be.
  const uint64_t stale = current ^ 0x10;

  {
    v1::NodeReadRequest request;
    request.set_gather_id("g");
    request.set_element_count(1);
    request.set_dtype(v1::DTYPE_FLOAT32);
    request.set_epoch(stale);
    auto context = Context();
    auto reader = peer_->NodeRead(context.get(), request);
    v1::NodeReadResponse chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    ExpectFenced("NodeRead", reader->Finish(), stale, current);
  }
  {
    v1::NodeStatsRequest request;
    request.set_gather_id("g");
    request.add_tensors(0);
    request.set_epoch(stale);
    v1::NodeStatsResponse response;
    ExpectFenced("NodeStats",
                 peer_->NodeStats(Context().get(), request, &response), stale,
                 current);
  }
  {
    v1::NodeAbortRequest request;
    request.set_epoch(stale);
    v1::NodeAbortResponse response;
    ExpectFenced("NodeAbort",
                 peer_->NodeAbort(Context().get(), request, &response), stale,
                 current);
  }
  {
    v1::NodeReleaseRequest request;
    request.set_gather_id("g");
    request.set_epoch(stale);
    v1::NodeReleaseResponse response;
    ExpectFenced("NodeRelease",
                 peer_->NodeRelease(Context().get(), request, &response), stale,
                 current);
  }
  {
    v1::NodeSetGenerationsRequest request;
    request.set_model("m");
    (*request.mutable_generations())[0] = 99;
    (*request.mutable_generations())[1] = 99;
    request.set_epoch(stale);
    v1::NodeSetGenerationsResponse response;
    ExpectFenced("NodeSetGenerations",
                 peer_->NodeSetGenerations(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeWatchPartialsRequest request;
    request.set_model("m");
    request.add_params("norm.w");
    request.add_binned(false);
    request.add_lower(0);
    request.add_upper(0);
    request.set_epoch(stale);
    v1::NodeWatchPartialsResponse response;
    ExpectFenced("NodeWatchPartials",
                 peer_->NodeWatchPartials(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeWatchVersionsRequest request;
    request.set_epoch(stale);
    v1::NodeWatchVersionsResponse response;
    ExpectFenced("NodeWatchVersions",
                 peer_->NodeWatchVersions(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeWatchFetchRequest request;
    request.set_model("m");
    request.set_epoch(stale);
    auto context = Context();
    auto reader = peer_->NodeWatchFetch(context.get(), request);
    v1::WatchChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    ExpectFenced("NodeWatchFetch", reader->Finish(), stale, current);
  }
  {
    v1::NodeCreateModelRequest request;
    request.mutable_create()->set_name("fresh");
    request.mutable_create()->set_layout_json(kUnevenLayout);
    request.set_epoch(stale);
    v1::NodeModelResponse response;
    ExpectFenced("NodeCreateModel",
                 peer_->NodeCreateModel(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeLoadModelRequest request;
    request.set_model("m");
    request.set_path(root_ + "/src.safetensors");
    request.set_epoch(stale);
    v1::NodeModelResponse response;
    ExpectFenced("NodeLoadModel",
                 peer_->NodeLoadModel(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeSaveModelRequest request;
    request.set_model("m");
    request.set_path(root_ + "/stale.safetensors");
    request.set_epoch(stale);
    v1::NodeModelResponse response;
    ExpectFenced("NodeSaveModel",
                 peer_->NodeSaveModel(Context().get(), request, &response),
                 stale, current);
  }
  {
    v1::NodeChecksumRequest request;
    request.set_model("m");
    request.set_epoch(stale);
    v1::ModelChecksumResponse response;
    ExpectFenced("NodeChecksum",
                 peer_->NodeChecksum(Context().get(), request, &response),
                 stale, current);
    EXPECT_EQ(response.shards_size(), 0);
  }
  {
    v1::NodeDeleteModelRequest request;
    request.set_model("m");
    request.set_epoch(stale);
    v1::NodeModelResponse response;
    ExpectFenced("NodeDeleteModel",
                 peer_->NodeDeleteModel(Context().get(), request, &response),
                 stale, current);
  }

  // Nothing changed on the follower: "m" is there with the same bytes and
  // generations on every rank, "fresh" was never made, no file was written.
  const v1::ModelChecksumResponse after = ChecksumOk(leader, "m");
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "before: " << before.ShortDebugString()
      << "\nafter: " << after.ShortDebugString();
  for (const v1::ShardChecksum& shard : after.shards()) {
    EXPECT_EQ(shard.generation(), 0u) << shard.ShortDebugString();
  }
  EXPECT_FALSE(std::filesystem::exists(root_ + "/stale.safetensors"));
  {
    // The current epoch is answered: the follower's own checksums of "m"
    // (its ranks 2 and 3), and NOT_FOUND for "fresh".
    v1::NodeChecksumRequest request;
    request.set_model("m");
    request.set_epoch(current);
    v1::ModelChecksumResponse response;
    const grpc::Status status =
        peer_->NodeChecksum(Context().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.shards_size(), 6);
    for (const v1::ShardChecksum& shard : response.shards()) {
      EXPECT_TRUE(shard.rank() == 2 || shard.rank() == 3)
          << shard.ShortDebugString();
    }
    request.set_model("fresh");
    response.Clear();
    EXPECT_EQ(
        peer_->NodeChecksum(Context().get(), request, &response).error_code(),
        grpc::StatusCode::NOT_FOUND);
  }
  // The leader's fan-outs carry the epoch: a delete reaches the follower.
  ASSERT_TRUE(leader.DeleteModel("m").ok());
  {
    v1::NodeChecksumRequest request;
    request.set_model("m");
    request.set_epoch(current);
    v1::ModelChecksumResponse response;
    EXPECT_EQ(
        peer_->NodeChecksum(Context().get(), request, &response).error_code(),
        grpc::StatusCode::NOT_FOUND);
  }
}

// A follower that lost its leader has left that epoch: an operation of the
// epoch still on its way (sent before the leader's failure, or by the
// leader paused and resumed) must not run there, nor take a sequence number
// the next epoch's operations count on. The leader is paused, the follower
// fails over (NOT_SERVING) and is sent the first operation of the epoch it
// was in: it refuses it as fenced (in epoch 0 until it joins again), and an
// operation of no epoch too, and
// once the leader is back the re-formed cluster holds the same generations.
TEST_F(ClusterFenceTest, AFollowerThatLostItsLeaderRefusesThatEpoch) {
  const client::SummonClient& leader = cluster_->client(0);
  CreateSeeded(leader, "m", kUnevenLayout, v1::SHARDING_STRATEGY_FULL_SHARD);
  const v1::ModelChecksumResponse before = ChecksumOk(leader, "m");
  const uint64_t left = FollowerEpoch();
  ASSERT_NE(left, 0u);
  ASSERT_TRUE(cluster_->Signal(0, SIGSTOP).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  absl::StatusOr<health::HealthCheckResponse::ServingStatus> serving;
  while ((serving = cluster_->Health(1)).ok() &&
         *serving == health::HealthCheckResponse::SERVING &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_NE(*serving, health::HealthCheckResponse::SERVING);
  v1::NodeSetGenerationsRequest request;
  request.set_sequence(1);  // The first of the follower's reset order.
  request.set_model("m");
  (*request.mutable_generations())[0] = 99;
  request.set_epoch(left);
  v1::NodeSetGenerationsResponse response;
  const grpc::Status status =
      peer_->NodeSetGenerations(Context().get(), request, &response);
  // And as a leader that failed too would send it, from no epoch: two
  // nodes in epoch 0 must not take each other's operations (numbered in no
  // common order, they met the next epoch's under one Gloo tag).
  request.set_epoch(0);
  const grpc::Status no_epoch =
      peer_->NodeSetGenerations(Context().get(), request, &response);
  ASSERT_TRUE(cluster_->Signal(0, SIGCONT).ok());
  ExpectFenced("NodeSetGenerations", status, left, 0);
  EXPECT_EQ(no_epoch.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(no_epoch.error_message(),
            "node 1 is fenced: the operation carries no cluster epoch, the "
            "node is in epoch 0");
  const absl::Time formed_by = absl::Now() + absl::Seconds(60);
  const auto both_serving = [&] {
    for (int node = 0; node < 2; ++node) {
      absl::StatusOr<health::HealthCheckResponse::ServingStatus> node_serving =
          cluster_->Health(node);
      if (!node_serving.ok() ||
          *node_serving != health::HealthCheckResponse::SERVING) {
        return false;
      }
    }
    return true;
  };
  while (!both_serving() && absl::Now() < formed_by) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(both_serving()) << "the cluster did not re-form within 60 s";
  const v1::ModelChecksumResponse after = ChecksumOk(leader, "m");
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "before: " << before.ShortDebugString()
      << "\nafter: " << after.ShortDebugString();
}

}  // namespace
}  // namespace summon::tests
