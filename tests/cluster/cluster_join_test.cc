// A cluster whose other node never joins: the started daemon keeps reporting
// NOT_SERVING and answers every operation with UNAVAILABLE quickly (a
// listing from what it knows, naming the missing node), never
// hanging, and still stops cleanly on SIGTERM.

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {
namespace {

namespace health = ::grpc::health::v1;

// How fast an operation must be refused (a hang would wait for the call's
// 20 s deadline).
constexpr absl::Duration kRefusalBound = absl::Seconds(2);

constexpr char kLayout[] = R"({"units": [{"fqn": "", "params": [
    {"fqn": "w", "shape": [4], "dtype": "float32"}]}]})";

// The node's health once its daemon answers at all (it listens before it
// knows its peers), or the last error after 20 s.
absl::StatusOr<health::HealthCheckResponse::ServingStatus> FirstHealth(
    const LocalCluster& cluster, int node) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  absl::StatusOr<health::HealthCheckResponse::ServingStatus> status;
  do {
    status = cluster.Health(node);
    if (status.ok()) return status;
    absl::SleepFor(absl::Milliseconds(25));
  } while (absl::Now() < give_up);
  return status;
}

// Asserts that `call` returns UNAVAILABLE within kRefusalBound.
template <typename Call>
void ExpectPromptlyUnavailable(const std::string& what, Call call) {
  const absl::Time start = absl::Now();
  const absl::Status status = call();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable)
      << what << ": " << status;
  EXPECT_LT(took, kRefusalBound) << what << " took " << took;
}

class ClusterJoinTest : public testing::TestWithParam<int> {};

TEST_P(ClusterJoinTest, ALoneNodeStaysNotServingAndRefusesPromptly) {
  const int started_node = GetParam();
  LocalCluster::Options options;
  options.nodes = 2;
  options.local_ranks = 2;
  options.started = {started_node};
  absl::StatusOr<std::unique_ptr<LocalCluster>> started =
      LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  const client::SummonClient& node = cluster.client(started_node);

  absl::StatusOr<health::HealthCheckResponse::ServingStatus> status =
      FirstHealth(cluster, started_node);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, health::HealthCheckResponse::NOT_SERVING);

  ExpectPromptlyUnavailable("CreateModel", [&] {
    client::CreateModelParams params;
    params.name = "m";
    params.layout_json = kLayout;
    return node.CreateModel(params).status();
  });
  ExpectPromptlyUnavailable("OpenSession", [&] {
    return node.OpenSession("m", v1::SessionOptions()).status();
  });
  // A listing is read-only: it answers from what the node knows, naming
  // the node it cannot reach (issue 33), and as promptly.
  {
    const absl::Time start = absl::Now();
    const absl::StatusOr<v1::ListModelsResponse> listed = node.ListModels();
    EXPECT_LT(absl::Now() - start, kRefusalBound);
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->models_size(), 0);
    EXPECT_EQ(std::vector<int>(listed->nodes_down().begin(),
                               listed->nodes_down().end()),
              std::vector<int>{1 - started_node});
  }
  ExpectPromptlyUnavailable("ReportPhase", [&] {
    return node.ReportPhase("m", 0, v1::TRAINING_PHASE_FORWARD).status();
  });
  ExpectPromptlyUnavailable("ReadTensor", [&] {
    client::ReadTensorParams read;
    read.tensor = {"s-0", "w", false};
    return node.ReadTensor(read).status();
  });
  ExpectPromptlyUnavailable("WriteTensor", [&] {
    client::WriteTensorParams write;
    write.tensor = {"s-0", "w", false};
    write.dtype = v1::DTYPE_FLOAT32;
    return node.WriteTensor(write, FloatBytes({1, 2, 3, 4})).status();
  });

  // Still waiting, not serving, a while later.
  absl::SleepFor(absl::Milliseconds(500));
  status = cluster.Health(started_node);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, health::HealthCheckResponse::NOT_SERVING);

  // SIGTERM stops it although it never saw its peer.
  const absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// The leader alone (its follower never joins), and a follower alone (its
// leader is not there).
INSTANTIATE_TEST_SUITE_P(StartedNode, ClusterJoinTest, testing::Values(0, 1),
                         [](const testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? "Leader" : "Follower";
                         });

}  // namespace
}  // namespace summon::tests
