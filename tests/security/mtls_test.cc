// summond requiring client certificates (--tls-client-ca): who gets in, and
// as whom.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "summon/v1/peer.grpc.pb.h"
#include "summon/v1/summon.grpc.pb.h"
#include "tests/security/secure_cluster.h"

namespace summon::tests {
namespace {

constexpr char kLayout[] = R"({"units": [{"fqn": "", "params": [
  {"fqn": "w", "shape": [8], "dtype": "float32"}]}]})";

class MtlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SecureCluster::Options options;
    options.require_client_certificates = true;
    options.extra_token_lines = {"cert alice editor"};
    absl::StatusOr<std::unique_ptr<SecureCluster>> started =
        SecureCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = std::move(*started);
  }

  // OpenSession (writable: editor) of model "m" as the holder of
  // `certificate` (and `token`): the status, and the owner on success.
  grpc::Status Open(const std::string& certificate, const std::string& token,
                    std::string* owner, const std::string& ca = "ca.crt") {
    auto stub = v1::Summon::NewStub(cluster_->Channel(0, certificate, ca));
    grpc::ClientContext context;
    if (!token.empty()) {
      context.set_credentials(grpc::AccessTokenCredentials(token));
    }
    v1::OpenSessionRequest open;
    open.set_model("m");
    open.mutable_options()->set_writeback(false);
    v1::Session session;
    grpc::Status status = stub->OpenSession(&context, open, &session);
    if (status.ok()) *owner = session.owner();
    return status;
  }

  std::unique_ptr<SecureCluster> cluster_;
};

TEST_F(MtlsTest, CertificatesDecideWhoCallsAndTokensMayRefineIt) {
  v1::CreateModelRequest create;
  create.set_name("m");
  create.set_layout_json(kLayout);
  ASSERT_EQ(ErrorOf(CallAnyMethod(*cluster_->Channel(0, "alice"),
                                  "/summon.v1.Summon/CreateModel", create,
                                  cluster_->tokens().at("admin"))),
            "");
  std::string owner;
  // No client certificate: the TLS handshake fails.
  EXPECT_EQ(Open("", cluster_->tokens().at("admin"), &owner).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A certificate saying CN=alice from another CA: refused as well.
  EXPECT_EQ(Open("mallory", "", &owner).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // alice's certificate: principal alice, an editor by the cert line.
  ASSERT_TRUE(Open("alice", "", &owner).ok());
  EXPECT_EQ(owner, "alice");
  // A token on top names its own principal.
  ASSERT_TRUE(Open("alice", cluster_->tokens().at("viewer"), &owner).ok());
  EXPECT_EQ(owner, "viewer-user");
  // A verified certificate that no line grants anything: known, powerless.
  const grpc::Status nobody = Open("server", "", &owner);
  EXPECT_EQ(nobody.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(nobody.error_message().find("principal 'summond' (roles: none)"),
            std::string::npos)
      << nobody.error_message();
}

TEST(MtlsClusterTest, PeersAuthenticateWithTheirNodeCertificates) {
  // No peer token: the nodes can only form the cluster by presenting their
  // certificates, whose SAN (127.0.0.1) names a --nodes host.
  SecureCluster::Options options;
  options.nodes = 2;
  options.require_client_certificates = true;
  options.peer_token = false;
  options.extra_token_lines = {"cert alice viewer"};
  absl::StatusOr<std::unique_ptr<SecureCluster>> cluster =
      SecureCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // And alice, through the follower, is forwarded as alice.
  v1::ListModelsRequest list;
  EXPECT_EQ(ErrorOf(CallAnyMethod(*(*cluster)->Channel(1, "alice"),
                                  "/summon.v1.Summon/ListModels", list, "")),
            "");
  // alice is no peer.
  EXPECT_EQ(CallAnyMethod(*(*cluster)->Channel(1, "alice"),
                          "/summon.v1.Peer/StoreGet", v1::StoreGetRequest(), "")
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace summon::tests
