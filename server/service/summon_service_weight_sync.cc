// Weight sync's Summon handlers: Publish (decided by the leader, which has
// every node take its copy), WaitVersion and ReadSlices (answered by the
// node asked, from its own copies and only the elements it needs of other
// nodes'). They translate; server/weight_sync/ decides.

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "server/service/local_fd_broker.h"
#include "server/service/proto_conversion.h"
#include "server/service/summon_service.h"
#include "server/weight_sync/slice_buffer.h"
#include "server/weight_sync/slice_destination.h"

namespace summon::server {
namespace {

// Data messages stay well under gRPC's default 4 MiB message limit.
constexpr int64_t kSliceChunkBytes = int64_t{1} << 20;

absl::Status NoWeightSync() {
  return absl::FailedPreconditionError("weight sync is not served here");
}

absl::StatusOr<std::vector<SliceRequest>> EntriesFromProto(
    const v1::ReadSlicesRequest& request) {
  std::vector<SliceRequest> entries;
  for (int i = 0; i < request.entries_size(); ++i) {
    const v1::SliceEntry& entry = request.entries(i);
    SliceRequest out;
    out.fqn = entry.fqn();
    for (const v1::SliceRange& range : entry.box()) {
      out.box.emplace_back(range.start(), range.length());
    }
    if (entry.dtype() != v1::DTYPE_UNSPECIFIED) {
      absl::StatusOr<core::DType> dtype =
          DTypeFromProto(entry.dtype(), "dtype");
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "entry ", i, " ('", entry.fqn(), "'): ", dtype.status().message()));
      }
      out.dtype = *dtype;
    }
    entries.push_back(std::move(out));
  }
  return entries;
}

// "entry i ('fqn')" per entry, as errors name them.
std::vector<std::string> EntryNames(const v1::ReadSlicesRequest& request) {
  std::vector<std::string> names;
  for (int i = 0; i < request.entries_size(); ++i) {
    names.push_back(
        absl::StrCat("entry ", i, " ('", request.entries(i).fqn(), "')"));
  }
  return names;
}

std::vector<int64_t> EntryBytes(const PlannedRead& read) {
  std::vector<int64_t> bytes;
  for (const SlicePlan& entry : read.entries) bytes.push_back(entry.bytes);
  return bytes;
}

// The caller's cuda_buffer, checked and opened: only for a caller on this
// host (its IPC handle names memory here), through summond's CUDA (null
// `devices`: not served).
absl::StatusOr<std::unique_ptr<SliceDestination>> OpenCudaBuffer(
    DeviceSliceDestinations* devices, const grpc::ServerContext& context,
    const v1::ReadSlicesRequest& request, const PlannedRead& read) {
  const v1::CudaIpcBuffer& wire = request.cuda_buffer();
  CudaIpcTarget target;
  target.device = wire.device();
  target.ipc_handle = wire.ipc_handle();
  target.offset = wire.offset();
  target.bytes = wire.bytes();
  if (!IsLocalPeer(context.peer())) {
    return NoCudaDelivery(absl::StrCat(
        "the caller (", context.peer(),
        ") is not on the daemon's host, where a CUDA IPC handle opens"));
  }
  return OpenCudaTarget(devices, target, read.total_bytes, EntryNames(request),
                        read.offsets, EntryBytes(read));
}

// The stream as a destination: each window leaves as data messages of at
// most kSliceChunkBytes.
class StreamDestination final : public SliceDestination {
 public:
  StreamDestination(grpc::ServerContext& context,
                    grpc::ServerWriter<v1::ReadSlicesResponse>& writer)
      : context_(context), writer_(writer) {}

  absl::Status Write(int64_t /*at: the stream is in order*/,
                     const uint8_t* data, int64_t bytes) override {
    for (int64_t at = 0; at < bytes; at += kSliceChunkBytes) {
      if (context_.IsCancelled()) return absl::CancelledError("cancelled");
      v1::ReadSlicesResponse chunk;
      chunk.set_data(data + at, std::min(kSliceChunkBytes, bytes - at));
      if (!writer_.Write(chunk)) return absl::CancelledError("cancelled");
    }
    return absl::OkStatus();
  }

 private:
  grpc::ServerContext& context_;
  grpc::ServerWriter<v1::ReadSlicesResponse>& writer_;
};

// A granted local_buffer read: waits for the caller's buffer at the broker,
// checks it whole (size, shared memory, seals) before writing anything,
// then writes the header "being written", every entry, and "complete".
absl::Status IntoBuffer(LocalFdBroker& broker, SliceBufferCache& mappings,
                        WeightSync& sync, grpc::ServerContext& context,
                        const v1::ReadSlicesRequest& request,
                        const PlannedRead& read, const std::string& token,
                        int64_t* peer_bytes) {
  absl::StatusOr<int> fd =
      broker.Await(token,
                   std::min(absl::FromChrono(context.deadline()),
                            absl::Now() + broker.ttl()),
                   [&context] { return context.IsCancelled(); });
  if (!fd.ok()) return fd.status();
  absl::StatusOr<SliceBuffer> buffer =
      mappings.Map(*fd, read.total_bytes, EntryNames(request), read.offsets,
                   EntryBytes(read));
  if (!buffer.ok()) return buffer.status();
  buffer->Begin(request.version(), static_cast<int64_t>(read.entries.size()),
                token);
  if (absl::Status filled = sync.FillAll(read, buffer->data(), peer_bytes);
      !filled.ok()) {
    return filled;
  }
  buffer->Complete();
  // The caller may read it now: the reply need not wait for an unmap (of
  // a mapping the cache dropped meanwhile).
  SliceBuffer::UnmapLater(*std::move(buffer));
  return absl::OkStatus();
}

}  // namespace

grpc::Status SummonServiceImpl::Publish(grpc::ServerContext* context,
                                        const v1::PublishRequest* request,
                                        v1::PublishResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/Publish", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::Publish, *request, response)) {
    return *routed;
  }
  if (weight_sync_ == nullptr) return ToGrpcStatus(NoWeightSync());
  absl::StatusOr<PublishResult> published =
      weight_sync_->Publish(request->model(), request->step());
  if (!published.ok()) return ToGrpcStatus(published.status());
  response->set_version(published->version);
  for (int64_t version : published->kept) response->add_kept(version);
  response->set_bytes(published->bytes);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::WaitVersion(
    grpc::ServerContext* context, const v1::WaitVersionRequest* request,
    v1::WaitVersionResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/WaitVersion", *request);
      !denied.ok()) {
    return denied;
  }
  if (weight_sync_ == nullptr) return ToGrpcStatus(NoWeightSync());
  // Without a deadline the wait would hold a server thread forever.
  const absl::Time deadline = std::min(absl::FromChrono(context->deadline()),
                                       absl::Now() + absl::Hours(1));
  absl::StatusOr<int64_t> version =
      weight_sync_->Wait(request->model(), request->min_step(), deadline);
  if (!version.ok()) return ToGrpcStatus(version.status());
  response->set_version(*version);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::ReadSlices(
    grpc::ServerContext* context, const v1::ReadSlicesRequest* request,
    grpc::ServerWriter<v1::ReadSlicesResponse>* writer) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ReadSlices", *request);
      !denied.ok()) {
    return denied;
  }
  if (weight_sync_ == nullptr) return ToGrpcStatus(NoWeightSync());
  if (cluster_ != nullptr) {
    if (absl::Status ready = cluster_->CheckReady(); !ready.ok()) {
      return ToGrpcStatus(ready);
    }
  }
  if (request->local_buffer() && request->has_cuda_buffer()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "local_buffer and cuda_buffer are two destinations; ask for one"));
  }
  StreamSlot slot(*this);
  if (!slot.status().ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<std::vector<SliceRequest>> entries =
      EntriesFromProto(*request);
  if (!entries.ok()) return ToGrpcStatus(entries.status());
  // Every entry is checked here, before the first byte leaves.
  absl::StatusOr<PlannedRead> read =
      weight_sync_->Plan(request->model(), request->version(), *entries);
  if (!read.ok()) return ToGrpcStatus(read.status());
  // A CUDA buffer is checked and opened before the first message: a
  // refusal ends the call with nothing sent and nothing written.
  std::unique_ptr<SliceDestination> device;
  if (request->has_cuda_buffer()) {
    absl::StatusOr<std::unique_ptr<SliceDestination>> opened =
        OpenCudaBuffer(slice_devices_, *context, *request, *read);
    if (!opened.ok()) return ToGrpcStatus(opened.status());
    device = *std::move(opened);
  }
  ++weight_sync_->store().counters().reads;
  v1::ReadSlicesResponse header;
  for (size_t i = 0; i < read->entries.size(); ++i) {
    v1::SliceLayout* layout = header.add_entries();
    layout->set_offset(read->offsets[i]);
    layout->set_bytes(read->entries[i].bytes);
    for (int64_t dim : read->entries[i].shape) layout->add_shape(dim);
    layout->set_dtype(DTypeToProto(read->entries[i].dtype));
  }
  header.set_total_bytes(read->total_bytes);
  // The caller's buffer when it asked for one and can be handed one (on
  // this host, a broker running); data messages otherwise.
  std::string token;
  if (request->local_buffer() && fd_broker_ != nullptr &&
      IsLocalPeer(context->peer())) {
    absl::StatusOr<std::string> expected = fd_broker_->Expect();
    if (!expected.ok()) return ToGrpcStatus(expected.status());
    token = *std::move(expected);
    header.set_buffer_socket(fd_broker_->address());
    header.set_buffer_token(token);
    header.set_buffer_bytes(kSliceBufferHeaderBytes + read->total_bytes);
  }
  if (!writer->Write(header)) {
    if (!token.empty()) fd_broker_->Forget(token);
    return grpc::Status::CANCELLED;
  }
  int64_t peer_bytes = 0;
  absl::Status delivered;
  if (!token.empty()) {
    delivered = IntoBuffer(*fd_broker_, slice_buffers_, *weight_sync_,
                           *context, *request, *read, token, &peer_bytes);
  } else if (device != nullptr) {
    delivered = weight_sync_->Deliver(*read, *device, &peer_bytes);
  } else {
    StreamDestination stream(*context, *writer);
    delivered = weight_sync_->Deliver(*read, stream, &peer_bytes);
  }
  if (!delivered.ok()) return ToGrpcStatus(delivered);
  v1::ReadSlicesResponse last;
  last.mutable_stats()->set_slice_bytes(read->slice_bytes);
  last.mutable_stats()->set_peer_bytes(peer_bytes);
  last.mutable_stats()->set_cuda_buffer(device != nullptr);
  return writer->Write(last) ? grpc::Status::OK : grpc::Status::CANCELLED;
}

}  // namespace summon::server
