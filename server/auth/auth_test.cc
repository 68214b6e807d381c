// Unit tests of server/auth: roles and their table, the tokens file, and the
// checks on how a daemon may listen. The same pieces are exercised over real
// TLS connections by tests/security.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "server/auth/credentials.h"
#include "server/auth/roles.h"
#include "server/auth/tokens.h"
#include "summon/v1/peer.grpc.pb.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::server::auth {
namespace {

TEST(TokenHashTest, IsTheSha256OfTheToken) {
  // FIPS 180-2's example: SHA-256("abc").
  EXPECT_EQ(TokenHash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(RoleSetTest, ImplicationsAreExactlyAdminAndEditor) {
  const RoleSet viewer = *RoleSet::Parse("viewer");
  EXPECT_TRUE(viewer.Allows(Role::kViewer));
  EXPECT_FALSE(viewer.Allows(Role::kEditor));
  const RoleSet editor = *RoleSet::Parse("editor");
  EXPECT_TRUE(editor.Allows(Role::kViewer));
  EXPECT_FALSE(editor.Allows(Role::kTrainer));
  const RoleSet admin = *RoleSet::Parse("admin");
  for (Role role : {Role::kViewer, Role::kEditor, Role::kTrainer}) {
    EXPECT_TRUE(admin.Allows(role)) << RoleName(role);
  }
  EXPECT_FALSE(admin.Allows(Role::kPeer));
  EXPECT_FALSE(RoleSet::Parse("peer")->Allows(Role::kViewer));
  EXPECT_EQ(RoleSet::Parse("trainer, viewer")->ToString(), "viewer,trainer");
  EXPECT_EQ(RoleSet().ToString(), "none");
  EXPECT_EQ(RoleSet::Parse("root").status().message(),
            "unknown role 'root' (roles: viewer, editor, trainer, admin, "
            "peer)");
}

TEST(RpcTableTest, CoversEveryMethodOfEveryServiceAndNothingElse) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  size_t methods = 0;
  for (std::string name :
       {v1::Summon::service_full_name(), v1::Trainer::service_full_name(),
        v1::Peer::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* service =
        pool->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method =
          absl::StrCat("/", name, "/", service->method(i)->name());
      EXPECT_NE(FindRpcRule(method), nullptr) << method;
      ++methods;
    }
  }
  EXPECT_EQ(RpcTable().size(), methods);
  // Summon gained MapSession (issue 11, P3) and the four Watch calls (issue
  // 21); Peer NodeSetGenerations and NodeHealth (issue 20) and
  // NodeWatchPartials, NodeWatchVersions, NodeWatchFetch and NodeWatchApply
  // (21); Summon GetClusterStatus (issue 33); Summon Publish, WaitVersion,
  // ReadSlices and Peer NodePublishVersion, NodeReadVersion (issue 32).
  EXPECT_EQ(methods, 24u + 7u + 26u);
}

TEST(RpcTableTest, AWritableSessionNeedsAnEditor) {
  const RpcRule* open = FindRpcRule("/summon.v1.Summon/OpenSession");
  ASSERT_NE(open, nullptr);
  v1::OpenSessionRequest request;
  EXPECT_EQ(RequiredRole(*open, request), Role::kEditor);  // default: true
  request.mutable_options()->set_writeback(true);
  EXPECT_EQ(RequiredRole(*open, request), Role::kEditor);
  request.mutable_options()->set_writeback(false);
  EXPECT_EQ(RequiredRole(*open, request), Role::kViewer);
}

constexpr char kAliceHash[] =
    "9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc";

TEST(TokenTableTest, FindsTokensByHashWithRolesModelsAndExpiry) {
  ASSERT_EQ(TokenHash("alice-token"), kAliceHash);
  const std::string text = absl::StrCat(
      "# who\n", kAliceHash, "  alice  editor  models=m1,m2\n",
      TokenHash("old"), " bob viewer expires=2020-01-01T00:00:00Z\n",
      "cert trainer-0 trainer\n");
  absl::StatusOr<TokenTable> table = TokenTable::Parse(text);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  Grant grant;
  ASSERT_EQ(table->FindToken("alice-token", now, &grant),
            TokenTable::Lookup::kFound);
  EXPECT_EQ(grant.principal, "alice");
  EXPECT_EQ(grant.roles.ToString(), "editor");
  EXPECT_EQ(grant.models, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(table->FindToken("old", now, &grant), TokenTable::Lookup::kExpired);
  EXPECT_EQ(table->FindToken("old", absl::FromUnixSeconds(1500000000), &grant),
            TokenTable::Lookup::kFound);
  EXPECT_EQ(table->FindToken("nope", now, &grant),
            TokenTable::Lookup::kUnknown);
  ASSERT_TRUE(table->FindCertificate("trainer-0").has_value());
  EXPECT_EQ(table->FindCertificate("trainer-0")->roles.ToString(), "trainer");
  EXPECT_FALSE(table->FindCertificate("alice").has_value());
  EXPECT_TRUE(table->Grants("alice", Role::kViewer, now));
  EXPECT_FALSE(table->Grants("alice", Role::kAdmin, now));
  EXPECT_FALSE(table->Grants("bob", Role::kViewer, now));  // expired
}

TEST(TokenTableTest, RefusesBadLinesWithoutEchoingThem) {
  // A pasted token instead of its hash.
  absl::StatusOr<TokenTable> pasted =
      TokenTable::Parse("s3cret-token-value alice viewer\n");
  ASSERT_FALSE(pasted.ok());
  EXPECT_EQ(pasted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pasted.status().message().find("s3cret"), std::string::npos);
  EXPECT_NE(pasted.status().message().find("line 1"), std::string::npos);
  EXPECT_EQ(TokenTable::Parse(absl::StrCat("\n", kAliceHash, " alice\n"))
                .status()
                .message(),
            "tokens file line 2: expected <credential> <principal> <roles>");
  EXPECT_EQ(TokenTable::Parse(absl::StrCat(kAliceHash, " a viewer\n",
                                           kAliceHash, " b viewer\n"))
                .status()
                .message(),
            "tokens file line 2: a second line for the same token");
  EXPECT_FALSE(
      TokenTable::Parse(absl::StrCat(kAliceHash, " a viewer expires=soon"))
          .ok());
}

TEST(SecuritySpecTest, RefusesWhatWouldExposeTheDaemon) {
  SecuritySpec insecure;  // insecure_local by default (embedders)
  EXPECT_TRUE(CheckSecuritySpec(insecure, {"127.0.0.1:0"}, false).ok());
  EXPECT_TRUE(CheckSecuritySpec(insecure, {"[::1]:7070"}, false).ok());
  EXPECT_TRUE(CheckSecuritySpec(insecure, {"localhost:7070"}, false).ok());
  absl::Status open = CheckSecuritySpec(insecure, {"0.0.0.0:7070"}, false);
  EXPECT_EQ(open.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(open.message().find("0.0.0.0:7070 is reachable from other hosts"),
            std::string::npos)
      << open;

  SecuritySpec nothing;
  nothing.insecure_local = false;
  EXPECT_NE(CheckSecuritySpec(nothing, {"127.0.0.1:0"}, false)
                .message()
                .find("summond needs TLS"),
            std::string::npos);

  SecuritySpec tokens_in_clear = insecure;
  tokens_in_clear.tokens_file = "/tmp/tokens";
  EXPECT_NE(CheckSecuritySpec(tokens_in_clear, {"127.0.0.1:0"}, false)
                .message()
                .find("--tokens needs TLS"),
            std::string::npos);

  SecuritySpec tls;
  tls.insecure_local = false;
  tls.tls_cert = "server.crt";
  tls.tls_key = "server.key";
  EXPECT_TRUE(CheckSecuritySpec(tls, {"0.0.0.0:7070"}, false).ok());
  EXPECT_NE(CheckSecuritySpec(tls, {"0.0.0.0:7070"}, true)
                .message()
                .find("a TLS cluster needs its peers to prove who they are"),
            std::string::npos);
  tls.peer_token_file = "peer.token";
  EXPECT_TRUE(CheckSecuritySpec(tls, {"0.0.0.0:7070"}, true).ok());

  SecuritySpec both = tls;
  both.insecure_local = true;
  EXPECT_NE(CheckSecuritySpec(both, {"127.0.0.1:0"}, false)
                .message()
                .find("contradict"),
            std::string::npos);
  SecuritySpec half = tls;
  half.tls_key.clear();
  EXPECT_EQ(CheckSecuritySpec(half, {}, false).message(),
            "--tls-cert and --tls-key go together: give both or neither");
}

}  // namespace
}  // namespace summon::server::auth
