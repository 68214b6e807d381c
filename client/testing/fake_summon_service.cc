#include "client/testing/fake_summon_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/lib/summon_client.h"
#include "client/lib/wire_dtype.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace summon::client {

void FakeCalls::SetResponse(const std::string& method,
                            const google::protobuf::Message& response) {
  absl::MutexLock lock(&mutex_);
  responses_[method].reset(response.New());
  responses_[method]->CopyFrom(response);
}

void FakeCalls::SetError(const std::string& method, grpc::Status status) {
  absl::MutexLock lock(&mutex_);
  errors_[method] = std::move(status);
}

void FakeCalls::SetDelay(const std::string& method, absl::Duration delay) {
  absl::MutexLock lock(&mutex_);
  delays_[method] = delay;
}

int FakeCalls::Count(const std::string& method) const {
  absl::MutexLock lock(&mutex_);
  const auto it = counts_.find(method);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::string> FakeCalls::Principals() const {
  absl::MutexLock lock(&mutex_);
  return principals_;
}

grpc::Status FakeCalls::Answer(const std::string& method,
                               const grpc::ServerContext& context,
                               const google::protobuf::Message& request,
                               google::protobuf::Message* response) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mutex_);
    const auto it = delays_.find(method);
    if (it != delays_.end()) delay = it->second;
  }
  absl::SleepFor(delay);
  absl::MutexLock lock(&mutex_);
  ++counts_[method];
  last_requests_[method].reset(request.New());
  last_requests_[method]->CopyFrom(request);
  const auto principal = context.client_metadata().find(kPrincipalMetadataKey);
  principals_.push_back(
      principal == context.client_metadata().end()
          ? ""
          : std::string(principal->second.data(), principal->second.size()));
  const auto error = errors_.find(method);
  if (error != errors_.end()) return error->second;
  const auto configured = responses_.find(method);
  if (configured != responses_.end() && response != nullptr) {
    response->CopyFrom(*configured->second);
  }
  return grpc::Status::OK;
}

void FakeSummonService::SetTensor(const v1::TensorInfo& info,
                                  std::string data) {
  absl::MutexLock lock(&mutex_);
  tensor_info_ = info;
  tensor_data_ = std::move(data);
}

void FakeSummonService::SetReadStream(
    std::vector<v1::ReadTensorResponse> messages) {
  absl::MutexLock lock(&mutex_);
  read_stream_ = std::move(messages);
  fixed_read_stream_ = true;
}

ReceivedWrite FakeSummonService::LastWrite() const {
  absl::MutexLock lock(&mutex_);
  return last_write_;
}

grpc::Status FakeSummonService::ListModels(grpc::ServerContext* context,
                                           const v1::ListModelsRequest* request,
                                           v1::ListModelsResponse* response) {
  return calls_.Answer("ListModels", *context, *request, response);
}

grpc::Status FakeSummonService::DescribeModel(
    grpc::ServerContext* context, const v1::DescribeModelRequest* request,
    v1::Model* response) {
  return calls_.Answer("DescribeModel", *context, *request, response);
}

grpc::Status FakeSummonService::CreateModel(
    grpc::ServerContext* context, const v1::CreateModelRequest* request,
    v1::Model* response) {
  return calls_.Answer("CreateModel", *context, *request, response);
}

grpc::Status FakeSummonService::LoadModel(grpc::ServerContext* context,
                                          const v1::LoadModelRequest* request,
                                          v1::LoadModelResponse* response) {
  return calls_.Answer("LoadModel", *context, *request, response);
}

grpc::Status FakeSummonService::SaveModel(grpc::ServerContext* context,
                                          const v1::SaveModelRequest* request,
                                          v1::SaveModelResponse* response) {
  return calls_.Answer("SaveModel", *context, *request, response);
}

grpc::Status FakeSummonService::ModelChecksum(
    grpc::ServerContext* context, const v1::ModelChecksumRequest* request,
    v1::ModelChecksumResponse* response) {
  return calls_.Answer("ModelChecksum", *context, *request, response);
}

grpc::Status FakeSummonService::OpenSession(
    grpc::ServerContext* context, const v1::OpenSessionRequest* request,
    v1::Session* response) {
  return calls_.Answer("OpenSession", *context, *request, response);
}

grpc::Status FakeSummonService::GetSession(grpc::ServerContext* context,
                                           const v1::GetSessionRequest* request,
                                           v1::Session* response) {
  return calls_.Answer("GetSession", *context, *request, response);
}

grpc::Status FakeSummonService::ListSessions(
    grpc::ServerContext* context, const v1::ListSessionsRequest* request,
    v1::ListSessionsResponse* response) {
  return calls_.Answer("ListSessions", *context, *request, response);
}

grpc::Status FakeSummonService::RenewSession(
    grpc::ServerContext* context, const v1::RenewSessionRequest* request,
    v1::Session* response) {
  return calls_.Answer("RenewSession", *context, *request, response);
}

grpc::Status FakeSummonService::CloseSession(
    grpc::ServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  return calls_.Answer("CloseSession", *context, *request, response);
}

grpc::Status FakeSummonService::ReadTensor(
    grpc::ServerContext* context, const v1::ReadTensorRequest* request,
    grpc::ServerWriter<v1::ReadTensorResponse>* writer) {
  const grpc::Status answer =
      calls_.Answer("ReadTensor", *context, *request, nullptr);
  if (!answer.ok()) return answer;
  absl::MutexLock lock(&mutex_);
  if (fixed_read_stream_) {
    for (const v1::ReadTensorResponse& message : read_stream_) {
      writer->Write(message);
    }
    return grpc::Status::OK;
  }
  const size_t element_size = ElementSize(tensor_info_.dtype());
  const int64_t first = request->element_offset();
  const int64_t count = request->has_element_count()
                            ? request->element_count()
                            : tensor_info_.numel() - first;
  const size_t chunk_elements = std::max<size_t>(
      1,
      (request->chunk_bytes() == 0 ? size_t{1} << 20 : request->chunk_bytes()) /
          element_size);
  v1::ReadTensorResponse message;
  *message.mutable_info() = tensor_info_;
  int64_t next = first;
  do {
    const int64_t elements = std::min<int64_t>(
        static_cast<int64_t>(chunk_elements), first + count - next);
    message.set_element_offset(next);
    message.set_data(
        tensor_data_.substr(static_cast<size_t>(next) * element_size,
                            static_cast<size_t>(elements) * element_size));
    writer->Write(message);
    message.clear_info();
    next += elements;
  } while (next < first + count);
  return grpc::Status::OK;
}

void FakeSummonService::SetSlices(std::vector<v1::SliceLayout> entries,
                                  std::string packed,
                                  std::string buffer_socket) {
  absl::MutexLock lock(&mutex_);
  slice_entries_ = std::move(entries);
  slice_bytes_ = std::move(packed);
  slice_socket_ = std::move(buffer_socket);
}

std::vector<bool> FakeSummonService::SliceBufferAsks() const {
  absl::MutexLock lock(&mutex_);
  return slice_buffer_asks_;
}

grpc::Status FakeSummonService::ReadSlices(
    grpc::ServerContext* context, const v1::ReadSlicesRequest* request,
    grpc::ServerWriter<v1::ReadSlicesResponse>* writer) {
  v1::ReadSlicesResponse header;
  std::string packed;
  {
    absl::MutexLock lock(&mutex_);
    slice_buffer_asks_.push_back(request->local_buffer());
    for (const v1::SliceLayout& entry : slice_entries_) {
      *header.add_entries() = entry;
    }
    header.set_total_bytes(static_cast<int64_t>(slice_bytes_.size()));
    if (request->local_buffer() && !slice_socket_.empty()) {
      header.set_buffer_socket(slice_socket_);
      header.set_buffer_token("fake-token-of-this-call");
    }
    packed = slice_bytes_;
  }
  writer->Write(header);
  if (!header.buffer_token().empty()) {
    // Granted: the daemon would write into the caller's buffer once it
    // arrives at the socket; none comes, and the caller cancels.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!context->IsCancelled() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "no buffer came");
  }
  v1::ReadSlicesResponse data;
  data.set_data(packed);
  writer->Write(data);
  v1::ReadSlicesResponse stats;
  stats.mutable_stats()->set_slice_bytes(static_cast<int64_t>(packed.size()));
  writer->Write(stats);
  return grpc::Status::OK;
}

grpc::Status FakeSummonService::WriteTensor(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::WriteTensorRequest>* reader,
    v1::WriteTensorResponse* response) {
  ReceivedWrite received;
  v1::WriteTensorRequest message;
  while (reader->Read(&message)) {
    received.is_header.push_back(message.has_header());
    if (message.has_header()) {
      received.header = message.header();
    } else {
      received.chunk_sizes.push_back(message.data().size());
      received.data += message.data();
    }
  }
  // Like summond, a stream the client cancelled applies (records) nothing.
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "write stream cancelled");
  }
  const grpc::Status answer =
      calls_.Answer("WriteTensor", *context, received.header, response);
  absl::MutexLock lock(&mutex_);
  last_write_ = received;
  if (!answer.ok()) return answer;
  *response->mutable_info() = tensor_info_;
  const size_t element_size = ElementSize(received.header.dtype());
  response->set_elements_written(
      element_size == 0
          ? 0
          : static_cast<int64_t>(received.data.size() / element_size));
  return grpc::Status::OK;
}

grpc::Status FakeSummonService::TensorStats(
    grpc::ServerContext* context, const v1::TensorStatsRequest* request,
    v1::TensorStatsResponse* response) {
  return calls_.Answer("TensorStats", *context, *request, response);
}

grpc::Status FakeTrainerService::ReportPhase(
    grpc::ServerContext* context, const v1::ReportPhaseRequest* request,
    v1::ReportPhaseResponse* response) {
  return calls_.Answer("ReportPhase", *context, *request, response);
}

grpc::Status FakeTrainerService::MapShards(grpc::ServerContext* context,
                                           const v1::MapShardsRequest* request,
                                           v1::MapShardsResponse* response) {
  return calls_.Answer("MapShards", *context, *request, response);
}

FakeSummonServer::FakeSummonServer(const std::string& listen) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&summon_);
  builder.RegisterService(&trainer_);
  server_ = builder.BuildAndStart();
  address_ = absl::StartsWith(listen, "unix:")
                 ? listen
                 : absl::StrCat("127.0.0.1:", port);
}

FakeSummonServer::~FakeSummonServer() { server_->Shutdown(); }

}  // namespace summon::client
