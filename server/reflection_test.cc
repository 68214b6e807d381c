// Server reflection as grpcurl uses it, through the public v1alpha protocol.

#include <memory>
#include <set>
#include <string>

#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace summon::server {
namespace {

using ::grpc::reflection::v1alpha::ServerReflection;
using ::grpc::reflection::v1alpha::ServerReflectionRequest;
using ::grpc::reflection::v1alpha::ServerReflectionResponse;

class ReflectionTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SummonServer>> server =
        SummonServer::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = ServerReflection::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  // One request/response exchange on a fresh reflection stream.
  ServerReflectionResponse Ask(const ServerReflectionRequest& request) {
    grpc::ClientContext context;
    auto stream = stub_->ServerReflectionInfo(&context);
    EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->WritesDone());
    ServerReflectionResponse response;
    EXPECT_TRUE(stream->Read(&response));
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  std::unique_ptr<SummonServer> server_;
  std::unique_ptr<ServerReflection::Stub> stub_;
};

TEST_F(ReflectionTest, ListsSummonTrainerAndHealthServices) {
  ServerReflectionRequest request;
  request.set_list_services("");
  const ServerReflectionResponse response = Ask(request);
  ASSERT_TRUE(response.has_list_services_response()) << response.DebugString();

  std::set<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.insert(service.name());
  }
  EXPECT_EQ(names.count("summon.v1.Summon"), 1u);
  EXPECT_EQ(names.count("summon.v1.Trainer"), 1u);
  EXPECT_EQ(names.count("grpc.health.v1.Health"), 1u);
  EXPECT_EQ(names.count("grpc.reflection.v1alpha.ServerReflection"), 1u);
}

// grpcurl describe: the file declaring a service, with its methods.
TEST_F(ReflectionTest, DescribesTheSummonService) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol("summon.v1.Summon");
  const ServerReflectionResponse response = Ask(request);
  ASSERT_TRUE(response.has_file_descriptor_response())
      << response.DebugString();

  bool found = false;
  for (const std::string& bytes :
       response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "summon/v1/summon.proto") continue;
    found = true;
    EXPECT_EQ(file.package(), "summon.v1");
    ASSERT_EQ(file.service_size(), 1);
    std::set<std::string> methods;
    for (const auto& method : file.service(0).method()) {
      methods.insert(method.name());
    }
    EXPECT_EQ(methods.count("OpenSession"), 1u);
    EXPECT_EQ(methods.count("ReadTensor"), 1u);
    EXPECT_EQ(methods.count("WriteTensor"), 1u);
  }
  EXPECT_TRUE(found) << "summon/v1/summon.proto not in the response";
}

TEST_F(ReflectionTest, DescribesTheHealthService) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol("grpc.health.v1.Health");
  const ServerReflectionResponse response = Ask(request);
  ASSERT_TRUE(response.has_file_descriptor_response())
      << response.DebugString();
  ASSERT_EQ(response.file_descriptor_response().file_descriptor_proto_size(),
            1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(
      response.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "grpc/health/v1/health.proto");
  ASSERT_EQ(file.service_size(), 1);
  EXPECT_EQ(file.service(0).name(), "Health");
}

}  // namespace
}  // namespace summon::server
