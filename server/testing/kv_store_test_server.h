#ifndef SUMMON_SERVER_TESTING_KV_STORE_TEST_SERVER_H_
#define SUMMON_SERVER_TESTING_KV_STORE_TEST_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/server.h"
#include "server/cluster/kv_store.h"

namespace summon::server {

// A leader's rendezvous store reachable over the network, for tests: a gRPC
// server on 127.0.0.1 (a free port) serving a LocalKvStore through
// KvStoreService.
class KvStoreTestServer {
 public:
  // UNAVAILABLE when the server cannot start.
  static absl::StatusOr<std::unique_ptr<KvStoreTestServer>> Start();

  KvStoreTestServer(const KvStoreTestServer&) = delete;
  KvStoreTestServer& operator=(const KvStoreTestServer&) = delete;
  // Closes the store (releasing blocked waits), then stops the server.
  ~KvStoreTestServer();

  LocalKvStore& store() { return store_; }
  // "127.0.0.1:PORT".
  std::string address() const;
  // A new channel to the server (each simulated node gets its own).
  std::shared_ptr<grpc::Channel> NewChannel() const;

 private:
  KvStoreTestServer() = default;

  LocalKvStore store_;
  KvStoreService service_{store_};
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_TESTING_KV_STORE_TEST_SERVER_H_
