#include "server/server.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

std::unique_ptr<SummonServer> StartOrDie(SummonServer::Spec spec) {
  absl::StatusOr<std::unique_ptr<SummonServer>> server =
      SummonServer::Start(std::move(spec));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& target) {
  return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
}

HealthCheckResponse::ServingStatus CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::ClientContext context;
  const grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  EXPECT_TRUE(status.ok()) << service << ": " << status.error_message();
  return response.status();
}

TEST(SummonServerTest, PortZeroBindsAFreePortAndReportsTheAddress) {
  std::unique_ptr<SummonServer> server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));
}

TEST(SummonServerTest, HealthIsServingForServerAndServices) {
  std::unique_ptr<SummonServer> server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  const auto channel = ChannelTo(server->address());
  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel, "summon.v1.Summon"),
            HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel, "summon.v1.Trainer"),
            HealthCheckResponse::SERVING);
}

TEST(SummonServerTest, UnknownModelIsNotFoundNamingIt) {
  std::unique_ptr<SummonServer> server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  auto stub = summon::v1::Summon::NewStub(ChannelTo(server->address()));
  grpc::ClientContext context;
  summon::v1::DescribeModelRequest request;
  request.set_model("ghost");
  summon::v1::Model response;
  const grpc::Status status = stub->DescribeModel(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("ghost"), std::string::npos)
      << status.error_message();
}

TEST(SummonServerTest, TrainerPhaseMustBeSet) {
  std::unique_ptr<SummonServer> server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  auto stub = summon::v1::Trainer::NewStub(ChannelTo(server->address()));
  grpc::ClientContext context;
  summon::v1::ReportPhaseResponse response;
  const grpc::Status status =
      stub->ReportPhase(&context, summon::v1::ReportPhaseRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("phase"), std::string::npos)
      << status.error_message();
}

TEST(SummonServerTest, ServesOnUnixSocketAlone) {
  // Unix socket paths are limited to 107 bytes, too few for Bazel's
  // TEST_TMPDIR.
  char directory[] = "/tmp/summond-test-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string socket_path = absl::StrCat(directory, "/summond.sock");
  SummonServer::Spec spec;
  spec.listen_address = "";
  spec.unix_socket = socket_path;
  std::unique_ptr<SummonServer> server = StartOrDie(spec);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->port(), 0);
  EXPECT_EQ(server->address(), "");
  EXPECT_EQ(CheckHealth(ChannelTo(absl::StrCat("unix:", socket_path)), ""),
            HealthCheckResponse::SERVING);
  server.reset();
  // gRPC removes the socket file when the listener closes.
  EXPECT_NE(access(socket_path.c_str(), F_OK), 0);
  rmdir(directory);
}

TEST(SummonServerTest, ShutdownStopsServingAndWaitReturns) {
  std::unique_ptr<SummonServer> server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  const auto channel = ChannelTo(server->address());
  ASSERT_EQ(CheckHealth(channel, ""), HealthCheckResponse::SERVING);
  server->Shutdown();
  server->Wait();

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  HealthCheckResponse response;
  const grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, HealthCheckRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
}

TEST(SummonServerTest, SecondServerOnABoundPortIsUnavailable) {
  std::unique_ptr<SummonServer> first = StartOrDie({});
  ASSERT_NE(first, nullptr);
  SummonServer::Spec spec;
  spec.listen_address = first->address();
  const absl::StatusOr<std::unique_ptr<SummonServer>> second =
      SummonServer::Start(spec);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
}

struct BadSpecCase {
  const char* name;
  void (*edit)(SummonServer::Spec&);
  absl::StatusCode code;
};

TEST(SummonServerTest, BadSpecsAreRefusedBeforeListening) {
  const BadSpecCase cases[] = {
      {"no listener", [](SummonServer::Spec& s) { s.listen_address = ""; },
       absl::StatusCode::kInvalidArgument},
      {"zero local ranks", [](SummonServer::Spec& s) { s.local_ranks = 0; },
       absl::StatusCode::kInvalidArgument},
      {"node rank outside single node",
       [](SummonServer::Spec& s) { s.node_rank = 1; },
       absl::StatusCode::kInvalidArgument},
      {"node rank outside nodes list",
       [](SummonServer::Spec& s) {
         s.nodes = {"a:1", "b:1"};
         s.node_rank = 2;
       },
       absl::StatusCode::kInvalidArgument},
      {"cluster node without a fixed port",
       [](SummonServer::Spec& s) {
         s.nodes = {"127.0.0.1:0", "127.0.0.1:7071"};
       },
       absl::StatusCode::kInvalidArgument},
      {"negative memory budget",
       [](SummonServer::Spec& s) { s.memory_budget_bytes = -1; },
       absl::StatusCode::kInvalidArgument},
      {"negative copy pool bytes",
       [](SummonServer::Spec& s) { s.copy_pool_bytes = -1; },
       absl::StatusCode::kInvalidArgument},
      {"negative staging pool idle time",
       [](SummonServer::Spec& s) { s.staging_pool_idle = -absl::Seconds(1); },
       absl::StatusCode::kInvalidArgument},
      {"zero heartbeat",
       [](SummonServer::Spec& s) {
         s.heartbeat_interval = absl::ZeroDuration();
       },
       absl::StatusCode::kInvalidArgument},
      {"zero collective timeout",
       [](SummonServer::Spec& s) {
         s.collective_timeout = absl::ZeroDuration();
       },
       absl::StatusCode::kInvalidArgument},
  };
  for (const BadSpecCase& c : cases) {
    SummonServer::Spec spec;
    c.edit(spec);
    EXPECT_EQ(SummonServer::Start(spec).status().code(), c.code) << c.name;
  }
}

}  // namespace
}  // namespace summon::server
