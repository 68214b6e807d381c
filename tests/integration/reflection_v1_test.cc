// grpc.reflection.v1 against the real summond binary (so that what a static
// link keeps is what is tested), with a client that has no .proto files:
// every listed service is described well enough to build its methods'
// messages from the answers alone.

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/faults/child_process.h"

namespace summon::tests {
namespace {

namespace refl = ::grpc::reflection::v1;

class ReflectionV1Test : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    port_file_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/refl.port";
    std::remove(port_file_.c_str());
    absl::StatusOr<ChildProcess> daemon = ChildProcess::Spawn(
        {{"server/summond", "--insecure-local", "--listen", "127.0.0.1:0",
          "--port-file",
          port_file_, "--local-ranks", "1", "--log-level", "warn"},
         {},
         "",
         false});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    std::string port;
    for (int i = 0; i < 200 && port.empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      std::ifstream(port_file_) >> port;
    }
    ASSERT_FALSE(port.empty()) << "summond wrote no port file";
    stub_ = refl::ServerReflection::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
  }

  refl::ServerReflectionResponse Ask(const refl::ServerReflectionRequest& r) {
    grpc::ClientContext context;
    auto stream = stub_->ServerReflectionInfo(&context);
    EXPECT_TRUE(stream->Write(r));
    EXPECT_TRUE(stream->WritesDone());
    refl::ServerReflectionResponse response;
    EXPECT_TRUE(stream->Read(&response));
    EXPECT_TRUE(stream->Finish().ok());
    return response;
  }

  std::string port_file_;
  ChildProcess daemon_;
  std::unique_ptr<refl::ServerReflection::Stub> stub_;
};

TEST_F(ReflectionV1Test, ListsAndDescribesEveryServiceWithoutProtoFiles) {
  refl::ServerReflectionRequest list;
  list.set_list_services("");
  const refl::ServerReflectionResponse listed = Ask(list);
  std::set<std::string> names;
  for (const auto& service : listed.list_services_response().service()) {
    names.insert(service.name());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"grpc.health.v1.Health",
                                   "grpc.reflection.v1.ServerReflection",
                                   "grpc.reflection.v1alpha.ServerReflection",
                                   "summon.v1.Summon", "summon.v1.Trainer"}));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    refl::ServerReflectionRequest describe;
    describe.set_file_containing_symbol(name);
    const refl::ServerReflectionResponse answer = Ask(describe);
    ASSERT_FALSE(answer.has_error_response())
        << answer.error_response().error_message();
    // The files arrive imports first: a fresh pool builds them in order.
    google::protobuf::DescriptorPool pool;
    for (const std::string& bytes :
         answer.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      ASSERT_TRUE(file.ParseFromString(bytes));
      ASSERT_NE(pool.BuildFile(file), nullptr) << file.name();
    }
    const google::protobuf::ServiceDescriptor* service =
        pool.FindServiceByName(name);
    ASSERT_NE(service, nullptr);
    ASSERT_GT(service->method_count(), 0);
    for (int m = 0; m < service->method_count(); ++m) {
      EXPECT_NE(service->method(m)->input_type(), nullptr);
      EXPECT_NE(service->method(m)->output_type(), nullptr);
    }
    if (name == "grpc.health.v1.Health") {
      EXPECT_NE(pool.FindMethodByName("grpc.health.v1.Health.Check"), nullptr);
    }
    if (name == "summon.v1.Trainer") {
      const auto* attach = pool.FindMethodByName("summon.v1.Trainer.Attach");
      ASSERT_NE(attach, nullptr);
      EXPECT_EQ(attach->input_type()->full_name(), "summon.v1.AttachRequest");
    }
  }
}

TEST_F(ReflectionV1Test, UnknownSymbolIsNotFound) {
  refl::ServerReflectionRequest describe;
  describe.set_file_containing_symbol("summon.v1.NoSuchThing");
  const refl::ServerReflectionResponse answer = Ask(describe);
  EXPECT_EQ(answer.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

}  // namespace
}  // namespace summon::tests
