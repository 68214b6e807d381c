// summon.v1.Summon's tensor streams: ReadTensor, WriteTensor and
// TensorStats, and the stream slots that bound how many run at once.
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/read_chunk_wire.h"
#include "server/metrics/summon_metrics.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "server/service/summon_service.h"

namespace summon::server {
namespace {

constexpr int kDefaultHistogramBins = 16;

}  // namespace

SummonServiceImpl::StreamSlot::StreamSlot(SummonServiceImpl& service)
    : service_(service) {
  const int open = service_.open_streams_.fetch_add(1) + 1;
  if (service_.max_open_streams_ > 0 && open > service_.max_open_streams_) {
    status_ = absl::ResourceExhaustedError(absl::StrCat(
        "too many tensor streams in flight (", service_.max_open_streams_,
        ", --max-open-streams); retry later"));
  }
}

SummonServiceImpl::StreamSlot::~StreamSlot() {
  service_.open_streams_.fetch_sub(1);
}

grpc::Status SummonServiceImpl::StreamReadTensor(grpc::ServerContext* context,
                                                 ReadTensorStream* stream) {
  v1::ReadTensorRequest message;
  if (!stream->Read(&message)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "ReadTensor's request is missing or does not parse"));
  }
  const v1::ReadTensorRequest* request = &message;
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ReadTensor", *request);
      !denied.ok()) {
    return denied;
  }
  const StreamSlot slot(*this);
  if (!slot.status().ok()) return ToGrpcStatus(slot.status());
  if (cluster_ != nullptr) {
    // Reads of open sessions go on while etcd has no quorum.
    if (absl::Status ready = cluster_->CheckServingReads(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    if (!cluster_->formed_as_leader()) {
      return forwarder_.ReadTensor(context, *request, stream);
    }
  }
  std::optional<core::DType> dtype;
  if (request->dtype() != v1::DTYPE_UNSPECIFIED) {
    absl::StatusOr<core::DType> parsed =
        DTypeFromProto(request->dtype(), "dtype");
    if (!parsed.ok()) return ToGrpcStatus(parsed.status());
    dtype = *parsed;
  }
  std::optional<int64_t> count;
  if (request->has_element_count()) count = request->element_count();
  const std::string principal = PrincipalOf(*context);
  absl::StatusOr<SessionInfo> session =
      sessions_->Get(request->session_id(), principal);
  if (!session.ok()) return ToGrpcStatus(session.status());
  absl::StatusOr<core::SessionTensor> tensor = sessions_->DescribeTensor(
      request->session_id(), request->fqn(), request->grad(), principal);
  if (!tensor.ok()) return ToGrpcStatus(tensor.status());
  // The first chunk describes the tensor as sent (after any conversion).
  v1::TensorInfo info;
  TensorInfoToProto(*tensor, &info);
  if (dtype.has_value()) {
    info.set_dtype(DTypeToProto(*dtype));
  } else if (session->options.read_dtype.has_value()) {
    info.set_dtype(DTypeToProto(*session->options.read_dtype));
  }
  bool first = true;
  int64_t sent_bytes = 0;
  const absl::Time start = absl::Now();
  absl::Status status = sessions_->Read(
      request->session_id(), request->fqn(), request->grad(), dtype,
      request->element_offset(), count, request->chunk_bytes(), principal,
      [&](int64_t offset, absl::string_view bytes,
          const std::shared_ptr<const void>& pin) {
        // With a pin the reply references the copy until gRPC has sent it;
        // without, the bytes are copied once into the reply.
        const grpc::ByteBuffer chunk =
            wire::EncodeReadChunk(first ? &info : nullptr, offset, bytes, pin);
        first = false;
        if (context->IsCancelled() || !stream->Write(chunk)) return false;
        sent_bytes += static_cast<int64_t>(bytes.size());
        return true;
      });
  const metrics::SummonMetrics& m = metrics::Summon();
  m.read_bytes->Add({}, static_cast<double>(sent_bytes));
  m.read_seconds->Observe({}, metrics::SecondsSince(start));
  return ToGrpcStatus(status);
}

grpc::Status SummonServiceImpl::WriteTensor(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::WriteTensorRequest>* reader,
    v1::WriteTensorResponse* response) {
  if (grpc::Status denied = Allow(*context, "/summon.v1.Summon/WriteTensor",
                                  v1::WriteTensorRequest());
      !denied.ok()) {
    return denied;
  }
  const StreamSlot slot(*this);
  if (!slot.status().ok()) return ToGrpcStatus(slot.status());
  if (cluster_ != nullptr) {
    if (absl::Status ready = cluster_->CheckReady(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    if (!cluster_->is_leader()) {
      return forwarder_.WriteTensor(context, reader, response);
    }
  }
  const std::string principal = PrincipalOf(*context);
  v1::WriteTensorRequest message;
  if (!reader->Read(&message) || !message.has_header()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "the first message of a write must be its header"));
  }
  const v1::WriteTensorHeader header = message.header();
  absl::StatusOr<core::DType> dtype = DTypeFromProto(header.dtype(), "dtype");
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  // The target is checked before any data is accepted; the data is staged
  // and applied only once every declared byte arrived, so a truncated
  // stream changes nothing.
  absl::StatusOr<core::SessionTensor> tensor = sessions_->DescribeTensor(
      header.session_id(), header.fqn(), header.grad(), principal);
  if (!tensor.ok()) return ToGrpcStatus(tensor.status());
  // A whole-tensor write declares the shape (R5, checked by the session
  // manager) and must carry every element. Otherwise, without
  // element_count, whatever arrives before the half-close is written (up to
  // the end of the tensor).
  std::optional<core::Shape> shape;
  if (header.whole_tensor()) {
    shape = core::Shape(header.shape().begin(), header.shape().end());
  }
  const bool counted = header.has_element_count() || shape.has_value();
  const int64_t limit = header.has_element_count()
                            ? header.element_count()
                            : tensor->numel - header.element_offset();
  absl::StatusOr<core::SessionTensor> target = sessions_->CheckWriteTarget(
      header.session_id(), header.fqn(), header.grad(), *dtype,
      header.element_offset(), limit, principal, shape);
  if (!target.ok()) return ToGrpcStatus(target.status());
  const int64_t element_size = static_cast<int64_t>(core::ElementSize(*dtype));
  const int64_t expected = limit * element_size;
  std::string staged;
  if (counted) staged.reserve(static_cast<size_t>(expected));
  while (reader->Read(&message)) {
    if (message.has_header()) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          "a write has exactly one header, as its first message; nothing "
          "was applied"));
    }
    if (static_cast<int64_t>(message.data().size()) % element_size != 0) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "a data message of ", message.data().size(), " bytes is not whole ",
          core::DTypeName(*dtype), " elements; nothing was applied")));
    }
    if (static_cast<int64_t>(staged.size() + message.data().size()) >
        expected) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("write sends more than the ", expected, " bytes ",
                       counted ? "declared" : "left in the tensor",
                       "; nothing was applied")));
    }
    staged += message.data();
  }
  if (context->IsCancelled()) {
    return ToGrpcStatus(
        absl::CancelledError("write stream cancelled; nothing was applied"));
  }
  if (counted && static_cast<int64_t>(staged.size()) != expected) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("write stream ended after ", staged.size(), " of ",
                     expected, " bytes; nothing was applied")));
  }
  const int64_t count = static_cast<int64_t>(staged.size()) / element_size;
  absl::StatusOr<core::SessionTensor> written =
      sessions_->Write(header.session_id(), header.fqn(), header.grad(), *dtype,
                       header.element_offset(), staged, principal, shape);
  if (!written.ok()) return ToGrpcStatus(written.status());
  metrics::Summon().written_bytes->Add({}, static_cast<double>(staged.size()));
  TensorInfoToProto(*written, response->mutable_info());
  response->set_elements_written(count);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::MapSession(grpc::ServerContext* context,
                                           const v1::MapSessionRequest* request,
                                           v1::MapSessionResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/MapSession", *request);
      !denied.ok()) {
    return denied;
  }
  if (fd_broker_ == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this daemon maps no sessions (started with --map-sessions=false); "
        "read with ReadTensor"));
  }
  if (!IsLocalPeer(context->peer())) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "MapSession is for clients on the daemon's host, over loopback or its "
        "Unix socket (this call came from ",
        context->peer(), "); read with ReadTensor")));
  }
  if (cluster_ != nullptr) {
    if (absl::Status ready = cluster_->CheckServingReads(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
    // Sessions live on the leader: a follower cannot vouch for one.
    if (!cluster_->formed_as_leader()) {
      return ToGrpcStatus(absl::FailedPreconditionError(
          "sessions are mapped on the leader's host only (node 0); read "
          "with ReadTensor"));
    }
  }
  const std::string principal = PrincipalOf(*context);
  const std::string& id = request->session_id();
  absl::StatusOr<SessionManager::SharedCopy> shared = sessions_->ShareCopy(
      id, request->grad(), request->host_copy_only(), principal);
  if (!shared.ok()) return ToGrpcStatus(shared.status());
  for (const LocalCopyShare::DeviceCopy& device_copy :
       shared->share.device_copies) {
    v1::DeviceCopy* out = response->add_device_copies();
    out->set_device(device_copy.device);
    out->mutable_ranks()->Add(device_copy.ranks.begin(),
                              device_copy.ranks.end());
    out->set_ipc_handle(device_copy.ipc_handle);
  }
  if (shared->share.fd >= 0) {
    const int fd = shared->share.fd;
    SessionManager* sessions = sessions_;
    absl::StatusOr<std::string> token = fd_broker_->Grant(
        fd,
        [sessions, id, principal] { return sessions->IsOpen(id, principal); });
    if (!token.ok()) return ToGrpcStatus(token.status());
    response->set_socket(fd_broker_->address());
    response->set_token(*token);
    response->set_token_ttl_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(fd_broker_->ttl())));
  }
  response->set_copy_bytes(static_cast<uint64_t>(shared->bytes));
  for (const core::SessionTensor& tensor : shared->tensors) {
    v1::MappedTensor* mapped = response->add_tensors();
    TensorInfoToProto(tensor, mapped->mutable_info());
    mapped->set_byte_offset(static_cast<uint64_t>(tensor.buffer_offset));
  }
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::TensorStats(
    grpc::ServerContext* context, const v1::TensorStatsRequest* request,
    v1::TensorStatsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/TensorStats", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::TensorStats, *request, response)) {
    return *routed;
  }
  if (request->histogram_bins() > 4096) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("a histogram has at most 4096 bins (--bins N, "
                     "histogram_bins), got ",
                     request->histogram_bins())));
  }
  const int bins = request->has_histogram_bins()
                       ? static_cast<int>(request->histogram_bins())
                       : kDefaultHistogramBins;
  auto stats = sessions_->Stats(
      request->session_id(), {request->fqns().begin(), request->fqns().end()},
      request->grad(), bins, PrincipalOf(*context));
  if (!stats.ok()) return ToGrpcStatus(stats.status());
  for (const auto& [tensor, numbers] : *stats) {
    TensorStatisticsToProto(tensor, numbers, response->add_tensors());
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
