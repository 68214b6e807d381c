#ifndef SUMMON_CLIENT_TESTING_FAKE_SUMMON_SERVICE_H_
#define SUMMON_CLIENT_TESTING_FAKE_SUMMON_SERVICE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/server.h"
#include "grpcpp/server_context.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::client {

// In-process stand-ins for summond's Summon and Trainer services, so the
// client library and summonctl are tested without a daemon. Every unary RPC
// records its request and the caller's principal, then answers with the
// error or response the test set for that method name (default: OK with an
// empty response). Thread-safe.
class FakeCalls {
 public:
  void SetResponse(const std::string& method,
                   const google::protobuf::Message& response);
  void SetError(const std::string& method, grpc::Status status);
  // Answers `method` only after `delay` (for deadline tests).
  void SetDelay(const std::string& method, absl::Duration delay);

  int Count(const std::string& method) const;
  // The latest request of `method` as T; a default T when never called.
  template <typename T>
  T LastRequest(const std::string& method) const {
    absl::MutexLock lock(&mutex_);
    T request;
    const auto it = last_requests_.find(method);
    if (it != last_requests_.end()) request.CopyFrom(*it->second);
    return request;
  }
  // `summon-principal` metadata of every call in order ("" when absent).
  std::vector<std::string> Principals() const;

  // Records the call; returns the status to answer with, having copied the
  // configured response into `response` when that status is OK.
  grpc::Status Answer(const std::string& method,
                      const grpc::ServerContext& context,
                      const google::protobuf::Message& request,
                      google::protobuf::Message* response);

 private:
  mutable absl::Mutex mutex_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<google::protobuf::Message>>
      last_requests_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::unique_ptr<google::protobuf::Message>> responses_
      ABSL_GUARDED_BY(mutex_);
  std::map<std::string, grpc::Status> errors_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, absl::Duration> delays_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> principals_ ABSL_GUARDED_BY(mutex_);
};

// What the fake saw of one WriteTensor stream.
struct ReceivedWrite {
  // Every message in arrival order: true for a header, false for data.
  std::vector<bool> is_header;
  // The latest header.
  v1::WriteTensorHeader header;
  // Payload sizes of the data messages, in order, and their concatenation.
  std::vector<size_t> chunk_sizes;
  std::string data;
};

class FakeSummonService final : public v1::Summon::Service {
 public:
  FakeCalls& calls() { return calls_; }

  // ReadTensor streams this tensor's requested range in chunks of the
  // request's chunk_bytes (0: 1 MiB), unless SetReadStream replaced the
  // stream with fixed messages.
  void SetTensor(const v1::TensorInfo& info, std::string data);
  void SetReadStream(std::vector<v1::ReadTensorResponse> messages);
  ReceivedWrite LastWrite() const;

  grpc::Status ListModels(grpc::ServerContext* context,
                          const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status DescribeModel(grpc::ServerContext* context,
                             const v1::DescribeModelRequest* request,
                             v1::Model* response) override;
  grpc::Status CreateModel(grpc::ServerContext* context,
                           const v1::CreateModelRequest* request,
                           v1::Model* response) override;
  grpc::Status LoadModel(grpc::ServerContext* context,
                         const v1::LoadModelRequest* request,
                         v1::LoadModelResponse* response) override;
  grpc::Status SaveModel(grpc::ServerContext* context,
                         const v1::SaveModelRequest* request,
                         v1::SaveModelResponse* response) override;
  grpc::Status ModelChecksum(grpc::ServerContext* context,
                             const v1::ModelChecksumRequest* request,
                             v1::ModelChecksumResponse* response) override;
  grpc::Status OpenSession(grpc::ServerContext* context,
                           const v1::OpenSessionRequest* request,
                           v1::Session* response) override;
  grpc::Status GetSession(grpc::ServerContext* context,
                          const v1::GetSessionRequest* request,
                          v1::Session* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context,
                            const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status RenewSession(grpc::ServerContext* context,
                            const v1::RenewSessionRequest* request,
                            v1::Session* response) override;
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  grpc::Status ReadTensor(
      grpc::ServerContext* context, const v1::ReadTensorRequest* request,
      grpc::ServerWriter<v1::ReadTensorResponse>* writer) override;
  grpc::Status WriteTensor(grpc::ServerContext* context,
                           grpc::ServerReader<v1::WriteTensorRequest>* reader,
                           v1::WriteTensorResponse* response) override;
  grpc::Status TensorStats(grpc::ServerContext* context,
                           const v1::TensorStatsRequest* request,
                           v1::TensorStatsResponse* response) override;

  // ReadSlices answers `entries` and their `packed` bytes as a stream; a
  // request for a local buffer is first granted at `buffer_socket` (one
  // the test leaves out of reach) and held until the caller cancels it.
  void SetSlices(std::vector<v1::SliceLayout> entries, std::string packed,
                 std::string buffer_socket);
  // Whether each ReadSlices call asked for a local buffer, in order.
  std::vector<bool> SliceBufferAsks() const;
  grpc::Status ReadSlices(
      grpc::ServerContext* context, const v1::ReadSlicesRequest* request,
      grpc::ServerWriter<v1::ReadSlicesResponse>* writer) override;

 private:
  FakeCalls calls_;
  mutable absl::Mutex mutex_;
  v1::TensorInfo tensor_info_ ABSL_GUARDED_BY(mutex_);
  std::string tensor_data_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::ReadTensorResponse> read_stream_ ABSL_GUARDED_BY(mutex_);
  bool fixed_read_stream_ ABSL_GUARDED_BY(mutex_) = false;
  ReceivedWrite last_write_ ABSL_GUARDED_BY(mutex_);
  std::vector<v1::SliceLayout> slice_entries_ ABSL_GUARDED_BY(mutex_);
  std::string slice_bytes_ ABSL_GUARDED_BY(mutex_);
  std::string slice_socket_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> slice_buffer_asks_ ABSL_GUARDED_BY(mutex_);
};

class FakeTrainerService final : public v1::Trainer::Service {
 public:
  FakeCalls& calls() { return calls_; }

  grpc::Status ReportPhase(grpc::ServerContext* context,
                           const v1::ReportPhaseRequest* request,
                           v1::ReportPhaseResponse* response) override;
  grpc::Status MapShards(grpc::ServerContext* context,
                         const v1::MapShardsRequest* request,
                         v1::MapShardsResponse* response) override;

 private:
  FakeCalls calls_;
};

// Both fakes served at `listen`: by default 127.0.0.1 at a port chosen by
// the system; "unix:PATH" for a Unix socket.
class FakeSummonServer {
 public:
  explicit FakeSummonServer(const std::string& listen = "127.0.0.1:0");
  ~FakeSummonServer();

  const std::string& address() const { return address_; }
  FakeSummonService& summon() { return summon_; }
  FakeTrainerService& trainer() { return trainer_; }

 private:
  FakeSummonService summon_;
  FakeTrainerService trainer_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace summon::client

#endif  // SUMMON_CLIENT_TESTING_FAKE_SUMMON_SERVICE_H_
