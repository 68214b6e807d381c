#include "server/testing/kv_store_test_server.h"

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace summon::server {

absl::StatusOr<std::unique_ptr<KvStoreTestServer>> KvStoreTestServer::Start() {
  auto server = absl::WrapUnique(new KvStoreTestServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(&server->service_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError("cannot start the test rendezvous server");
  }
  return server;
}

KvStoreTestServer::~KvStoreTestServer() {
  store_.Close();
  if (server_ != nullptr) server_->Shutdown();
}

std::string KvStoreTestServer::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::shared_ptr<grpc::Channel> KvStoreTestServer::NewChannel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

}  // namespace summon::server
