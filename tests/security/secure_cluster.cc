#include "tests/security/secure_cluster.h"

#include <sys/mman.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/auth/tokens.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"
#include "tests/cluster/daemon_testing.h"

namespace summon::tests {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

constexpr char kRoles[][8] = {"viewer", "editor", "trainer", "admin", "peer"};

}  // namespace

absl::StatusOr<std::unique_ptr<SecureCluster>> SecureCluster::Start(
    Options options) {
  std::unique_ptr<SecureCluster> cluster(new SecureCluster());
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/secure-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError("cannot make a temporary directory");
  }
  cluster->root_ = pattern;
  cluster->pki_dir_ = pattern + "/pki";
  const std::string make_pki = absl::StrCat(
      RunfilePath("tests/security/make_pki.sh"), " ", cluster->pki_dir_);
  if (std::system(make_pki.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("failed: ", make_pki));
  }
  // One token per role; each token's entry names a principal of the same
  // name as the role.
  std::vector<std::string> lines = {"# role tokens of the test"};
  for (const char* role : kRoles) {
    const std::string token = absl::StrCat("token-of-", role, "-", rand());
    cluster->tokens_[role] = token;
    lines.push_back(absl::StrCat(server::auth::TokenHash(token), " ", role,
                                 "-user ", role));
  }
  cluster->tokens_["expired"] = "an-expired-token";
  lines.push_back(absl::StrCat(server::auth::TokenHash("an-expired-token"),
                               " late editor expires=2020-01-01T00:00:00Z"));
  for (const std::string& line : options.extra_token_lines) {
    lines.push_back(line);
  }
  cluster->tokens_file_ = pattern + "/tokens";
  std::ofstream(cluster->tokens_file_) << absl::StrJoin(lines, "\n") << "\n";
  const std::string peer_token_file = pattern + "/peer.token";
  std::ofstream(peer_token_file) << cluster->tokens_["peer"] << "\n";

  if (options.nodes > 1) {
    absl::StatusOr<std::vector<int>> ports = PickFreePorts(options.nodes);
    if (!ports.ok()) return ports.status();
    for (int port : *ports) {
      cluster->addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    }
  }
  for (int node = 0; node < options.nodes; ++node) {
    server::SummonServer::Spec spec;
    spec.local_ranks = options.local_ranks;
    spec.nodes = cluster->addresses_;
    spec.node_rank = node;
    spec.heartbeat_interval = absl::Milliseconds(200);
    cluster->data_dirs_.push_back(absl::StrCat(pattern, "/node", node));
    spec.data_dir = cluster->data_dirs_.back();
    server::auth::SecuritySpec& security = spec.security;
    security.insecure_local = false;
    security.tls_cert = cluster->pki("server.crt");
    security.tls_key = cluster->pki("server.key");
    security.tls_ca = cluster->pki("ca.crt");
    if (options.require_client_certificates) {
      security.tls_client_ca = cluster->pki("ca.crt");
    }
    security.tokens_file = cluster->tokens_file_;
    if (options.nodes > 1 && options.peer_token) {
      security.peer_token_file = peer_token_file;
    }
    absl::StatusOr<std::unique_ptr<server::SummonServer>> server =
        server::SummonServer::Start(std::move(spec));
    if (!server.ok()) return server.status();
    cluster->servers_.push_back(std::move(*server));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (const auto& server : cluster->servers_) {
    while (!server->ready()) {
      if (absl::Now() > deadline) {
        return absl::UnavailableError("the TLS cluster did not form");
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return cluster;
}

SecureCluster::~SecureCluster() {
  for (auto& server : servers_) server->Shutdown();
  servers_.clear();
  // The nodes had data directories, so their models' shared-memory shards
  // outlive them by design: unlink what the tests left.
  for (const std::string& data_dir : data_dirs_) {
    for (const std::string& segment : server::ShardStore::ListSegments(
             server::InstanceForDataDir(data_dir))) {
      shm_unlink(segment.c_str());
    }
  }
  std::error_code error;
  std::filesystem::remove_all(root_, error);
}

std::string SecureCluster::target(int node) const {
  return addresses_.empty() ? servers_[0]->address() : addresses_[node];
}

std::shared_ptr<grpc::Channel> SecureCluster::Channel(
    int node, const std::string& client_cert, const std::string& ca) const {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(pki(ca));
  if (!client_cert.empty()) {
    ssl.pem_cert_chain = ReadFile(pki(client_cert + ".crt"));
    ssl.pem_private_key = ReadFile(pki(client_cert + ".key"));
  }
  return grpc::CreateChannel(target(node), grpc::SslCredentials(ssl));
}

std::string ErrorOf(const grpc::Status& status) {
  if (status.ok()) return "";
  return absl::StrCat(status.error_code(), ": ", status.error_message());
}

grpc::Status CallAnyMethod(
    grpc::Channel& channel, const std::string& method,
    const google::protobuf::Message& request, const std::string& token,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  grpc::GenericStub stub(channel.shared_from_this());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (!token.empty()) {
    context.set_credentials(grpc::AccessTokenCredentials(token));
  }
  for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  void* tag = nullptr;
  bool ok = false;
  // Each operation completes before the next starts: one tag is enough.
  call->StartCall(&tag);
  queue.Next(&tag, &ok);
  grpc::ByteBuffer bytes;
  bool own = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(
      request, &bytes, &own);
  if (ok) {
    call->Write(bytes, &tag);
    queue.Next(&tag, &ok);
  }
  if (ok) {
    call->WritesDone(&tag);
    queue.Next(&tag, &ok);
  }
  if (ok) {
    grpc::ByteBuffer response;
    call->Read(&response, &tag);
    queue.Next(&tag, &ok);
    // A response stream that answered once (WatchUnits) may go on for ever:
    // one answer is enough.
    const std::string name =
        absl::StrReplaceAll(method.substr(1), {{"/", "."}});
    const google::protobuf::MethodDescriptor* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
            name);
    if (ok && descriptor != nullptr && descriptor->server_streaming()) {
      context.TryCancel();
    }
  }
  grpc::Status status;
  call->Finish(&status, &tag);
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

}  // namespace summon::tests
