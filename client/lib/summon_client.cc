#include "client/lib/summon_client.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/lib/stream_watchdog.h"
#include "client/lib/tensor_lookup.h"
#include "client/lib/wire_dtype.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "memory/fresh_memory.h"
#include "proto/read_chunk_wire.h"

namespace summon::client {
namespace {

// ReadTensor chunks carry up to 4 MiB of payload plus framing, over gRPC's
// default 4 MiB receive limit.
constexpr int kMaxReceiveMessageBytes = 16 << 20;

std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(
    const ClientOptions& options) {
  if (!options.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_root_certs;
  ssl.pem_cert_chain = options.tls_cert_chain;
  ssl.pem_private_key = options.tls_private_key;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (options.token.empty()) return credentials;
  return grpc::CompositeChannelCredentials(
      credentials, grpc::AccessTokenCredentials(options.token));
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& target,
                                         const ClientOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  // A fixed 8 MiB receive window instead of one grown by BDP probing: a
  // reader slower than the wire (a busy disk) then holds at most a few
  // chunks in memory, not tens of MiB, and loopback still streams at full
  // speed.
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  return grpc::CreateCustomChannel(target, CredentialsFor(options), arguments);
}

// One unary call on a generated stub.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Unary(
    Stub& stub,
    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                 Response*),
    absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context,
    const Request& request) {
  if (!context.ok()) return context.status();
  Response response;
  const grpc::Status status =
      (stub.*method)(context->get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status ReadStreamError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("ReadTensor stream: ", what));
}

// Appends ReadTensor chunks, checking that they line up.
// Checks a ReadTensor stream as it arrives: the first chunk describes the
// tensor, every chunk continues where the previous one ended with whole
// elements, and exactly the elements asked for arrive.
class ChunkChecker {
 public:
  explicit ChunkChecker(const ReadTensorParams& params) : params_(params) {}

  // OK when `chunk` continues the stream; sets *first for the first chunk.
  absl::Status Add(const wire::ReadChunkView& chunk, bool* first) {
    *first = element_size_ == 0;
    if (*first) {
      if (!chunk.has_info) return ReadStreamError("first chunk has no info");
      element_size_ = ElementSize(chunk.info.dtype());
      if (element_size_ == 0) {
        return ReadStreamError(
            absl::StrCat("unknown dtype ", chunk.info.dtype()));
      }
      expected_elements_ = params_.element_count.value_or(
          chunk.info.numel() - params_.element_offset);
      next_element_ = params_.element_offset;
    }
    if (chunk.element_offset != next_element_) {
      return ReadStreamError(absl::StrCat("chunk at element ",
                                          chunk.element_offset, ", expected ",
                                          next_element_));
    }
    const size_t size = static_cast<size_t>(chunk.data_bytes);
    if (size % element_size_ != 0) {
      return ReadStreamError(absl::StrCat(size, " bytes is not whole ",
                                          element_size_, "-byte elements"));
    }
    next_element_ += static_cast<int64_t>(size / element_size_);
    if (next_element_ - params_.element_offset > expected_elements_) {
      return ReadStreamError(absl::StrCat("more than the ", expected_elements_,
                                          " elements asked for"));
    }
    return absl::OkStatus();
  }

  absl::Status Finish() const {
    if (element_size_ == 0) return ReadStreamError("no chunk arrived");
    const int64_t received = next_element_ - params_.element_offset;
    if (received != expected_elements_) {
      return ReadStreamError(absl::StrCat("ended after ", received, " of ",
                                          expected_elements_, " elements"));
    }
    return absl::OkStatus();
  }

 private:
  const ReadTensorParams& params_;
  size_t element_size_ = 0;
  int64_t expected_elements_ = 0;
  int64_t next_element_ = 0;
};

absl::Status IdleStreamError(absl::Duration idle) {
  return absl::DeadlineExceededError(
      absl::StrCat("the tensor stream made no progress for ",
                   absl::FormatDuration(idle), "; cancelled"));
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

void TuneAllocatorForTensorStreams() {
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
}

SummonClient::SummonClient(const std::string& target, ClientOptions options)
    // `options` is copied, not moved: the order in which the two arguments
    // are built is unspecified, and the channel needs its TLS settings.
    : SummonClient(ChannelTo(target, options), options) {}

SummonClient::SummonClient(std::shared_ptr<grpc::ChannelInterface> channel,
                           ClientOptions options)
    : options_(std::move(options)),
      channel_(channel),
      summon_(v1::Summon::NewStub(channel)),
      trainer_(v1::Trainer::NewStub(channel)) {}

absl::StatusOr<std::unique_ptr<grpc::ClientContext>> SummonClient::NewContext(
    absl::Duration extra) const {
  // gRPC aborts the process on an illegal metadata value, so check first.
  for (const char c : options_.principal) {
    if (c < 0x20 || c > 0x7E) {
      return absl::InvalidArgumentError(
          "the principal must be printable ASCII (it travels as gRPC "
          "metadata)");
    }
  }
  auto context = std::make_unique<grpc::ClientContext>();
  if (!options_.principal.empty()) {
    context->AddMetadata(kPrincipalMetadataKey, options_.principal);
  }
  if (options_.timeout != absl::InfiniteDuration()) {
    context->set_deadline(
        absl::ToChronoTime(absl::Now() + options_.timeout + extra));
  }
  context->set_wait_for_ready(options_.wait_for_ready);
  return context;
}

absl::StatusOr<v1::ListModelsResponse> SummonClient::ListModels() const {
  return Unary(*summon_, &v1::Summon::Stub::ListModels, NewContext(),
               v1::ListModelsRequest());
}

absl::StatusOr<v1::Model> SummonClient::DescribeModel(
    const std::string& model) const {
  v1::DescribeModelRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::DescribeModel, NewContext(),
               request);
}

absl::StatusOr<v1::Model> SummonClient::CreateModel(
    const CreateModelParams& params) const {
  v1::CreateModelRequest request;
  request.set_name(params.name);
  request.set_layout_json(params.layout_json);
  if (params.strategy) request.set_strategy(*params.strategy);
  *request.mutable_init() = params.init;
  if (params.grad_ranks) {
    // An empty but present GradientShards message means "every rank".
    v1::GradientShards& grads = *request.mutable_grads();
    grads.mutable_ranks()->Add(params.grad_ranks->begin(),
                               params.grad_ranks->end());
    *grads.mutable_init() = params.grad_init;
  } else if (params.grad_init.method_case() != v1::InitMethod::METHOD_NOT_SET) {
    return absl::InvalidArgumentError(
        "CreateModel: grad_init without grad_ranks (a model without "
        "gradients has none to fill)");
  }
  return Unary(*summon_, &v1::Summon::Stub::CreateModel, NewContext(), request);
}

absl::StatusOr<v1::LoadModelResponse> SummonClient::LoadModel(
    const std::string& model, const std::string& path,
    const std::optional<v1::CheckpointWrapRule>& create,
    const std::string& skip, v1::DType dtype) const {
  v1::LoadModelRequest request;
  request.set_model(model);
  request.set_path(path);
  if (create) *request.mutable_create() = *create;
  request.set_skip(skip);
  request.set_dtype(dtype);
  return Unary(*summon_, &v1::Summon::Stub::LoadModel, NewContext(), request);
}

absl::StatusOr<v1::SaveModelResponse> SummonClient::SaveModel(
    const std::string& model, const std::string& path, uint64_t max_file_bytes,
    bool overwrite) const {
  v1::SaveModelRequest request;
  request.set_model(model);
  request.set_path(path);
  request.set_max_file_bytes(max_file_bytes);
  request.set_overwrite(overwrite);
  return Unary(*summon_, &v1::Summon::Stub::SaveModel, NewContext(), request);
}

absl::StatusOr<v1::ModelChecksumResponse> SummonClient::ModelChecksum(
    const std::string& model) const {
  v1::ModelChecksumRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::ModelChecksum, NewContext(),
               request);
}

absl::StatusOr<v1::DeleteModelResponse> SummonClient::DeleteModel(
    const std::string& model, bool force) const {
  v1::DeleteModelRequest request;
  request.set_model(model);
  request.set_force(force);
  return Unary(*summon_, &v1::Summon::Stub::DeleteModel, NewContext(), request);
}

absl::StatusOr<v1::Session> SummonClient::OpenSession(
    const std::string& model, const v1::SessionOptions& options) const {
  v1::OpenSessionRequest request;
  request.set_model(model);
  *request.mutable_options() = options;
  return Unary(*summon_, &v1::Summon::Stub::OpenSession, NewContext(), request);
}

absl::StatusOr<v1::Session> SummonClient::GetSession(
    const std::string& session_id) const {
  v1::GetSessionRequest request;
  request.set_session_id(session_id);
  return Unary(*summon_, &v1::Summon::Stub::GetSession, NewContext(), request);
}

absl::StatusOr<v1::ListSessionsResponse> SummonClient::ListSessions(
    const std::string& model) const {
  v1::ListSessionsRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::ListSessions, NewContext(),
               request);
}

absl::StatusOr<v1::Watch> SummonClient::AddWatch(
    const v1::AddWatchRequest& request) const {
  return Unary(*summon_, &v1::Summon::Stub::AddWatch, NewContext(), request);
}

absl::StatusOr<v1::ListWatchesResponse> SummonClient::ListWatches() const {
  return Unary(*summon_, &v1::Summon::Stub::ListWatches, NewContext(),
               v1::ListWatchesRequest());
}

absl::StatusOr<v1::RemoveWatchResponse> SummonClient::RemoveWatch(
    const std::string& model) const {
  v1::RemoveWatchRequest request;
  request.set_model(model);
  return Unary(*summon_, &v1::Summon::Stub::RemoveWatch, NewContext(),
               request);
}

absl::StatusOr<v1::ShowWatchResponse> SummonClient::ShowWatch(
    const v1::ShowWatchRequest& request) const {
  return Unary(*summon_, &v1::Summon::Stub::ShowWatch, NewContext(), request);
}

absl::StatusOr<v1::Session> SummonClient::RenewSession(
    const std::string& session_id,
    std::optional<uint32_t> lease_seconds) const {
  v1::RenewSessionRequest request;
  request.set_session_id(session_id);
  if (lease_seconds) request.set_lease_seconds(*lease_seconds);
  return Unary(*summon_, &v1::Summon::Stub::RenewSession, NewContext(),
               request);
}

absl::StatusOr<v1::CloseSessionResponse> SummonClient::CloseSession(
    const std::string& session_id, bool abort, bool force) const {
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  request.set_abort(abort);
  request.set_force(force);
  return Unary(*summon_, &v1::Summon::Stub::CloseSession, NewContext(),
               request);
}

absl::StatusOr<std::unique_ptr<grpc::ClientContext>>
SummonClient::NewStreamContext() const {
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context = NewContext();
  if (context.ok()) {
    // No overall deadline: a StreamWatchdog cancels the stream when it stops
    // moving instead.
    (*context)->set_deadline(std::chrono::system_clock::time_point::max());
  }
  return context;
}

absl::StatusOr<TensorData> SummonClient::ReadTensor(
    const ReadTensorParams& params) const {
  TensorData data;
  data.element_offset = params.element_offset;
  absl::Status status = ReadTensorChunks(
      params,
      [&](const v1::TensorInfo& info) {
        data.info = info;
        // One allocation for the whole tensor: appending to a growing string
        // would copy it again at every doubling and fault in every new page.
        const int64_t elements =
            params.element_count.value_or(info.numel() - params.element_offset);
        data.data.reserve(static_cast<size_t>(std::max<int64_t>(elements, 0)) *
                          ElementSize(info.dtype()));
        // Untouched yet: its first writes fault 2 MiB pages where THP is
        // on, instead of a 4 KiB fault every 4 KiB (memory/fresh_memory.h).
        memory::AdviseHugePages(data.data.data(),
                                static_cast<int64_t>(data.data.capacity()));
        return absl::OkStatus();
      },
      [&](absl::string_view bytes) {
        data.data.append(bytes.data(), bytes.size());
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return data;
}

absl::Status SummonClient::ReadTensorChunks(
    const ReadTensorParams& params,
    const std::function<absl::Status(const v1::TensorInfo&)>& on_info,
    const std::function<absl::Status(absl::string_view)>& on_bytes) const {
  v1::ReadTensorRequest request;
  request.set_session_id(params.tensor.session_id);
  request.set_fqn(params.tensor.fqn);
  request.set_grad(params.tensor.grad);
  request.set_dtype(params.dtype);
  request.set_element_offset(params.element_offset);
  if (params.element_count) request.set_element_count(*params.element_count);
  request.set_chunk_bytes(params.chunk_bytes);

  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context =
      NewStreamContext();
  if (!context.ok()) return context.status();
  StreamWatchdog watchdog(context->get(), options_.timeout);
  // Replies are read as raw byte buffers and the data handed on from gRPC's
  // own slices: no protobuf copy of the bytes (proto/read_chunk_wire.h).
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader =
      wire::StartRawReadTensor(channel_.get(), context->get(), request);
  ChunkChecker checker(params);
  absl::Status handled;
  grpc::ByteBuffer message;
  wire::ReadChunkView chunk;
  while (reader->Read(&message)) {
    watchdog.Progress();
    bool first = false;
    handled = wire::DecodeReadChunk(message, &chunk);
    message.Clear();
    if (handled.ok()) handled = checker.Add(chunk, &first);
    if (handled.ok() && first) handled = on_info(chunk.info);
    for (size_t i = 0; handled.ok() && i < chunk.data.size(); ++i) {
      handled = on_bytes(chunk.data[i]);
    }
    if (!handled.ok()) {
      // Stop the server's stream; Finish then reports CANCELLED, which the
      // checker's or the sink's error explains better.
      (*context)->TryCancel();
      while (reader->Read(&message)) {
      }
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!handled.ok()) return handled;
  if (watchdog.fired()) return IdleStreamError(options_.timeout);
  if (!status.ok()) return FromGrpcStatus(status);
  return checker.Finish();
}

absl::StatusOr<v1::WriteTensorResponse> SummonClient::WriteTensor(
    const WriteTensorParams& params, absl::string_view bytes) const {
  const size_t element_size = ElementSize(params.dtype);
  if (element_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteTensor needs a dtype, got ", v1::DType_Name(params.dtype)));
  }
  if (bytes.size() % element_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteTensor: ", bytes.size(), " bytes is not whole ",
                     v1::DType_Name(params.dtype), " elements"));
  }
  const size_t chunk_bytes = std::max(
      element_size, options_.write_chunk_bytes / element_size * element_size);
  size_t start = 0;
  return WriteTensorChunks(
      params, static_cast<int64_t>(bytes.size() / element_size),
      [&](std::string* chunk) -> absl::StatusOr<bool> {
        if (start >= bytes.size()) return false;
        const absl::string_view part = bytes.substr(start, chunk_bytes);
        chunk->assign(part.data(), part.size());
        start += part.size();
        return true;
      });
}

absl::StatusOr<v1::WriteTensorResponse> SummonClient::WriteTensorChunks(
    const WriteTensorParams& params, int64_t element_count,
    const std::function<absl::StatusOr<bool>(std::string*)>& next_chunk) const {
  if (ElementSize(params.dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteTensor needs a dtype, got ", v1::DType_Name(params.dtype)));
  }
  std::vector<int64_t> whole_shape;
  if (params.element_offset.has_value()) {
    if (*params.element_offset < 0) {
      return absl::OutOfRangeError(
          absl::StrCat("element_offset ", *params.element_offset,
                       " is before the start of ", params.tensor.fqn));
    }
  } else {
    absl::StatusOr<std::optional<v1::TensorInfo>> info =
        params.tensor_info.has_value() ? params.tensor_info
                                       : FindTensor(params.tensor);
    if (!info.ok()) return info.status();
    // A tensor the session does not hold: the server answers NOT_FOUND.
    if (info->has_value()) {
      absl::Status whole = CheckWholeWrite(**info, params, element_count);
      if (!whole.ok()) return whole;
      whole_shape.assign((*info)->shape().begin(), (*info)->shape().end());
    }
    if (!params.shape.empty()) whole_shape = params.shape;
  }
  v1::WriteTensorRequest header_message;
  v1::WriteTensorHeader& header = *header_message.mutable_header();
  // The server checks a whole-tensor write's shape itself (R5).
  if (!params.element_offset.has_value()) {
    header.set_whole_tensor(true);
    for (const int64_t extent : whole_shape) header.add_shape(extent);
  }
  header.set_session_id(params.tensor.session_id);
  header.set_fqn(params.tensor.fqn);
  header.set_grad(params.tensor.grad);
  header.set_dtype(params.dtype);
  header.set_element_offset(params.element_offset.value_or(0));
  header.set_element_count(element_count);

  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context =
      NewStreamContext();
  if (!context.ok()) return context.status();
  StreamWatchdog watchdog(context->get(), options_.timeout);
  v1::WriteTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::WriteTensorRequest>> writer =
      summon_->WriteTensor(context->get(), &response);
  // A failed Write means the server ended the stream; Finish says why.
  bool open = writer->Write(header_message);
  v1::WriteTensorRequest data_message;
  absl::Status source;
  while (open) {
    absl::StatusOr<bool> more = next_chunk(data_message.mutable_data());
    if (!more.ok()) {
      // The server applies nothing from a stream that does not end well.
      source = more.status();
      (*context)->TryCancel();
      break;
    }
    if (!*more) break;
    open = writer->Write(data_message);
    watchdog.Progress();
  }
  if (open && source.ok()) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!source.ok()) return source;
  if (watchdog.fired()) return IdleStreamError(options_.timeout);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::TensorStatsResponse> SummonClient::TensorStats(
    const std::string& session_id, const std::vector<std::string>& fqns,
    bool grad, std::optional<uint32_t> histogram_bins) const {
  v1::TensorStatsRequest request;
  request.set_session_id(session_id);
  for (const std::string& fqn : fqns) request.add_fqns(fqn);
  request.set_grad(grad);
  if (histogram_bins) request.set_histogram_bins(*histogram_bins);
  return Unary(*summon_, &v1::Summon::Stub::TensorStats, NewContext(), request);
}

absl::StatusOr<v1::MapSessionResponse> SummonClient::GrantMapSession(
    const std::string& session_id, bool grad, bool host_copy_only) const {
  v1::MapSessionRequest request;
  request.set_session_id(session_id);
  request.set_grad(grad);
  request.set_host_copy_only(host_copy_only);
  return Unary(*summon_, &v1::Summon::Stub::MapSession, NewContext(), request);
}

absl::StatusOr<MappedSession> SummonClient::MapSession(
    const std::string& session_id, bool grad) const {
  absl::StatusOr<v1::MapSessionResponse> grant =
      GrantMapSession(session_id, grad, /*host_copy_only=*/true);
  if (!grant.ok()) return grant.status();
  return MappedSession::Map(*std::move(grant));
}

absl::StatusOr<v1::ReportPhaseResponse> SummonClient::ReportPhase(
    const std::string& model, int32_t rank, v1::TrainingPhase phase,
    std::optional<int64_t> step, std::optional<uint32_t> deadline_ms) const {
  v1::ReportPhaseRequest request;
  request.set_model(model);
  request.set_rank(rank);
  request.set_phase(phase);
  if (step) request.set_step(*step);
  if (deadline_ms) request.set_deadline_ms(*deadline_ms);
  return Unary(*trainer_, &v1::Trainer::Stub::ReportPhase,
               NewContext(absl::Milliseconds(deadline_ms.value_or(0))),
               request);
}

absl::StatusOr<v1::MapShardsResponse> SummonClient::MapShards(
    const std::string& model, int32_t rank) const {
  v1::MapShardsRequest request;
  request.set_model(model);
  request.set_rank(rank);
  return Unary(*trainer_, &v1::Trainer::Stub::MapShards, NewContext(), request);
}

}  // namespace summon::client
