// summond over TLS with bearer tokens, in a real 2-node cluster (Gloo over
// loopback, peers authenticated by their peer token): the whole role table
// walked RPC by RPC and role by role, refused credentials, a spoofed
// principal header, the Peer service closed to clients, the audit log and
// the tokens file's reload.
#include "tests/security/secure_cluster.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/auth/roles.h"
#include "server/auth/tokens.h"
#include "summon/v1/peer.grpc.pb.h"
#include "summon/v1/summon.grpc.pb.h"

namespace summon::tests {
namespace {

using server::auth::Role;
using server::auth::RoleSet;

constexpr char kLayout[] = R"({"units": [{"fqn": "", "params": [
  {"fqn": "w", "shape": [64], "dtype": "float32"}]}]})";

class SecureClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SecureCluster::Options options;
    options.nodes = 2;
    options.extra_token_lines = {
        absl::StrCat(server::auth::TokenHash("limited-token"),
                     " limited-user viewer models=only")};
    absl::StatusOr<std::unique_ptr<SecureCluster>> started =
        SecureCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = started->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static std::string Token(const std::string& role) {
    return cluster_->tokens().at(role);
  }
  // Summon stub on `node` whose calls carry `role`'s token.
  static grpc::Status Call(
      int node, const std::string& method,
      const google::protobuf::Message& request, const std::string& role,
      std::vector<std::pair<std::string, std::string>> metadata = {}) {
    return CallAnyMethod(*cluster_->Channel(node), method, request,
                         role.empty() ? "" : Token(role), metadata);
  }
  static std::vector<nlohmann::json> AuditLines(int node) {
    std::ifstream file(cluster_->data_dir(node) + "/audit.log");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(file, line);) {
      lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
  }

  static SecureCluster* cluster_;
};

SecureCluster* SecureClusterTest::cluster_ = nullptr;

// Every RPC of the three services, called by every role on the leader and
// on a follower (which authorises, then forwards the caller's identity):
// PERMISSION_DENIED exactly where the table says the role falls short.
TEST_F(SecureClusterTest, RoleTableHoldsForEveryRpcAndRole) {
  const std::vector<std::string> roles = {"viewer", "editor", "trainer",
                                          "admin", "peer"};
  v1::OpenSessionRequest read_only;
  read_only.mutable_options()->set_writeback(false);
  v1::ListSessionsRequest every_session;
  every_session.set_all(true);
  int denied = 0;
  int allowed = 0;
  for (const server::auth::RpcRule& rule : server::auth::RpcTable()) {
    // OpenSession twice: writable (the default) and read-only; ListSessions
    // twice: the caller's own and every one (admin).
    std::vector<const google::protobuf::Message*> requests;
    std::unique_ptr<google::protobuf::Message> empty(
        google::protobuf::MessageFactory::generated_factory()
            ->GetPrototype(google::protobuf::DescriptorPool::generated_pool()
                               ->FindMethodByName(absl::StrReplaceAll(
                                   rule.method + 1, {{"/", "."}}))
                               ->input_type())
            ->New());
    requests.push_back(empty.get());
    if (absl::EndsWith(rule.method, "/OpenSession")) {
      requests.push_back(&read_only);
    }
    if (absl::EndsWith(rule.method, "/ListSessions")) {
      requests.push_back(&every_session);
    }
    for (const google::protobuf::Message* request : requests) {
      const Role needed = server::auth::RequiredRole(rule, *request);
      for (const std::string& role : roles) {
        const bool may = RoleSet::Parse(role)->Allows(needed);
        for (int node : {0, 1}) {
          SCOPED_TRACE(absl::StrCat(rule.method, " as ", role, " on node ",
                                    node, " ", request->ShortDebugString()));
          const grpc::Status status = Call(node, rule.method, *request, role);
          if (may) {
            ++allowed;
            EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
                << status.error_message();
            EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
                << status.error_message();
          } else {
            ++denied;
            EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
                << status.error_message();
            EXPECT_NE(status.error_message().find(
                          absl::StrCat("principal '", role, "-user'")),
                      std::string::npos)
                << status.error_message();
            EXPECT_NE(
                status.error_message().find(absl::StrCat(
                    "needs the ", server::auth::RoleName(needed), " role")),
                std::string::npos)
                << status.error_message();
          }
        }
      }
    }
  }
  // 59 rows (OpenSession and ListSessions twice; MapSession added by issue 11, Peer's
  // NodeSetGenerations and NodeHealth by issue 20, AddWatch, ListWatches,
  // RemoveWatch, ShowWatch and Peer's NodeWatchPartials, NodeWatchVersions,
  // NodeWatchFetch and NodeWatchApply by issue 21; ListSessions with all and
  // GetClusterStatus by issue 33; Publish, WaitVersion, ReadSlices and Peer's
  // NodePublishVersion and NodeReadVersion by issue 32) x 5 roles x 2 nodes.
  EXPECT_EQ(allowed + denied, 59 * 5 * 2);
  EXPECT_GT(allowed, 0);
  EXPECT_GT(denied, 0);
}

TEST_F(SecureClusterTest, BadCredentialsAreUnauthenticated) {
  const v1::ListModelsRequest list;
  const std::string method = "/summon.v1.Summon/ListModels";
  grpc::Status status = CallAnyMethod(*cluster_->Channel(0), method, list, "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(status.error_message().find("no credentials"), std::string::npos)
      << status.error_message();
  status = CallAnyMethod(*cluster_->Channel(0), method, list, "not-a-token");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "unknown bearer token");
  status = Call(1, method, list, "expired");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "the bearer token has expired");
  // Neither message echoes the token.
  EXPECT_EQ(status.error_message().find(Token("expired")), std::string::npos);
  // Plaintext to a TLS port does not get through at all.
  auto plaintext = grpc::CreateChannel(cluster_->target(0),
                                       grpc::InsecureChannelCredentials());
  status = CallAnyMethod(*plaintext, method, list, "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Nor does a client that trusts another CA (the server's certificate does
  // not verify).
  status = CallAnyMethod(*cluster_->Channel(0, "", "rogue-ca.crt"), method,
                         list, Token("admin"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecureClusterTest, SpoofedPrincipalHeaderIsIgnored) {
  v1::CreateModelRequest create;
  create.set_name("spoof");
  create.set_layout_json(kLayout);
  ASSERT_EQ(ErrorOf(Call(0, "/summon.v1.Summon/CreateModel", create, "admin")),
            "");
  // A viewer claiming to be the admin opens a read-only session through
  // the follower: the session is the viewer's.
  auto stub = v1::Summon::NewStub(cluster_->Channel(1));
  for (int node : {0, 1}) {
    auto channel = cluster_->Channel(node);
    auto node_stub = v1::Summon::NewStub(channel);
    grpc::ClientContext context;
    context.set_credentials(grpc::AccessTokenCredentials(Token("viewer")));
    context.AddMetadata("summon-principal", "admin-user");
    context.AddMetadata("summon-forwarded-roles", "admin");
    v1::OpenSessionRequest open;
    open.set_model("spoof");
    open.mutable_options()->set_writeback(false);
    v1::Session session;
    const grpc::Status status =
        node_stub->OpenSession(&context, open, &session);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(session.owner(), "viewer-user") << "node " << node;
    v1::CloseSessionRequest close;
    close.set_session_id(session.id());
    EXPECT_EQ(
        ErrorOf(Call(node, "/summon.v1.Summon/CloseSession", close, "viewer")),
        "");
  }
  v1::DeleteModelRequest remove;
  remove.set_model("spoof");
  // The forged roles do not make a viewer an admin either.
  const grpc::Status forged =
      Call(1, "/summon.v1.Summon/DeleteModel", remove, "viewer",
           {{"summon-principal", "admin-user"},
            {"summon-forwarded-roles", "admin"}});
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ErrorOf(Call(0, "/summon.v1.Summon/DeleteModel", remove, "admin")),
            "");
}

TEST_F(SecureClusterTest, ModelLimitedTokensTouchOnlyTheirModels) {
  v1::DescribeModelRequest describe;
  describe.set_model("other");
  const grpc::Status other =
      CallAnyMethod(*cluster_->Channel(1), "/summon.v1.Summon/DescribeModel",
                    describe, "limited-token");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(other.error_message(),
            "principal 'limited-user' may not touch model 'other' (its "
            "credentials cover: only)");
  // Its own model passes the check (and does not exist).
  describe.set_model("only");
  EXPECT_EQ(
      CallAnyMethod(*cluster_->Channel(1), "/summon.v1.Summon/DescribeModel",
                    describe, "limited-token")
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
  // Calls naming no model are not limited.
  EXPECT_EQ(ErrorOf(CallAnyMethod(*cluster_->Channel(1),
                                  "/summon.v1.Summon/ListModels",
                                  v1::ListModelsRequest(), "limited-token")),
            "");
}

TEST_F(SecureClusterTest, PeerServiceRefusesClients) {
  v1::DeleteModelRequest remove;
  remove.set_model("anything");
  for (const char* role : {"viewer", "editor", "trainer", "admin"}) {
    const grpc::Status status =
        Call(1, "/summon.v1.Peer/NodeDeleteModel", remove, role);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << role;
    EXPECT_NE(status.error_message().find("needs the peer role"),
              std::string::npos);
  }
  EXPECT_EQ(CallAnyMethod(*cluster_->Channel(1), "/summon.v1.Peer/StoreGet",
                          v1::StoreGetRequest(), "")
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecureClusterTest, AuditLogRecordsWritesAndRefusals) {
  v1::CreateModelRequest create;
  create.set_name("audited");
  create.set_layout_json(kLayout);
  // A viewer's try is refused and logged where it was refused (node 1).
  EXPECT_EQ(
      Call(1, "/summon.v1.Summon/CreateModel", create, "viewer").error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_EQ(ErrorOf(Call(1, "/summon.v1.Summon/CreateModel", create, "admin")),
            "");
  v1::DeleteModelRequest remove;
  remove.set_model("audited");
  ASSERT_EQ(ErrorOf(Call(0, "/summon.v1.Summon/DeleteModel", remove, "admin")),
            "");

  bool refused = false;
  for (const nlohmann::json& line : AuditLines(1)) {
    refused |= line["principal"] == "viewer-user" &&
               line["action"] == "CreateModel" && line["model"] == "audited" &&
               line["result"] == "PERMISSION_DENIED";
  }
  EXPECT_TRUE(refused);
  // The leader decided (and logged) the admin's create and delete, once
  // each; the follower that forwarded the create did not log it again.
  int created = 0;
  int deleted = 0;
  for (const nlohmann::json& line : AuditLines(0)) {
    if (line["model"] != "audited") continue;
    EXPECT_EQ(line["principal"], "admin-user");
    EXPECT_EQ(line["result"], "OK");
    created += line["action"] == "CreateModel";
    deleted += line["action"] == "DeleteModel";
  }
  EXPECT_EQ(created, 1);
  EXPECT_EQ(deleted, 1);
  for (const nlohmann::json& line : AuditLines(1)) {
    EXPECT_FALSE(line["action"] == "CreateModel" && line["result"] == "OK");
  }
}

TEST_F(SecureClusterTest, TokensFileReloadTakesNewTokensAndDropsOldOnes) {
  const std::string method = "/summon.v1.Summon/ListModels";
  const v1::ListModelsRequest list;
  std::stringstream original;
  original << std::ifstream(cluster_->tokens_file()).rdbuf();
  // Rotate: the editor's token goes, a new one comes.
  std::string rotated;
  for (absl::string_view line : absl::StrSplit(original.str(), '\n')) {
    if (!absl::StrContains(line, " editor-user ")) {
      absl::StrAppend(&rotated, line, "\n");
    }
  }
  absl::StrAppend(&rotated, server::auth::TokenHash("fresh-token"),
                  " fresh-user viewer\n");
  std::ofstream(cluster_->tokens_file()) << rotated;
  for (int node : {0, 1}) {
    ASSERT_TRUE(cluster_->server(node).ReloadTokens().ok());
  }
  EXPECT_EQ(ErrorOf(CallAnyMethod(*cluster_->Channel(1), method, list,
                                  "fresh-token")),
            "");
  EXPECT_EQ(Call(1, method, list, "editor").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // A broken file is refused and the table in force stays.
  std::ofstream(cluster_->tokens_file()) << "this is not a tokens file\n";
  const absl::Status broken = cluster_->server(0).ReloadTokens();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(broken.message().find("this is not"), std::string::npos);
  EXPECT_EQ(ErrorOf(CallAnyMethod(*cluster_->Channel(0), method, list,
                                  "fresh-token")),
            "");
  std::ofstream(cluster_->tokens_file()) << original.str();
  for (int node : {0, 1}) {
    ASSERT_TRUE(cluster_->server(node).ReloadTokens().ok());
  }
  EXPECT_EQ(ErrorOf(Call(1, method, list, "editor")), "");
}

}  // namespace
}  // namespace summon::tests
