// Weight sync's Summon handlers: Publish (decided by the leader, which has
// every node take its copy), WaitVersion and ReadSlices (answered by the
// node asked, from its own copies and only the elements it needs of other
// nodes'). They translate; server/weight_sync/ decides.

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "server/service/summon_service.h"

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
        return absl::InvalidArgumentError(
            absl::StrCat("entry ", i, " ('", entry.fqn(),
                         "'): ", dtype.status().message()));
      }
      out.dtype = *dtype;
    }
    entries.push_back(std::move(out));
  }
  return entries;
}

}  // namespace

grpc::Status SummonServiceImpl::Publish(grpc::ServerContext* context,
                                        const v1::PublishRequest* request,
                                        v1::PublishResponse* response) {
  if (grpc::Status denied = Allow(*context, "/summon.v1.Summon/Publish",
                                  *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = Route(*context, &v1::Summon::Stub::Publish, *request,
                          response)) {
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
  const absl::Time deadline =
      std::min(absl::FromChrono(context->deadline()),
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
  StreamSlot slot(*this);
  if (!slot.status().ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<std::vector<SliceRequest>> entries =
      EntriesFromProto(*request);
  if (!entries.ok()) return ToGrpcStatus(entries.status());
  // Every entry is checked here, before the first byte leaves.
  absl::StatusOr<PlannedRead> read =
      weight_sync_->Plan(request->model(), request->version(), *entries);
  if (!read.ok()) return ToGrpcStatus(read.status());
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
  if (!writer->Write(header)) return grpc::Status::CANCELLED;
  // Each entry assembled whole (its pieces come from several ranks and
  // nodes), then sent with the zero gap that aligns the next.
  int64_t peer_bytes = 0;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < read->entries.size(); ++i) {
    const int64_t end = i + 1 < read->entries.size() ? read->offsets[i + 1]
                                                     : read->total_bytes;
    bytes.assign(end - read->offsets[i], 0);
    if (absl::Status filled = weight_sync_->Fill(*read, static_cast<int>(i),
                                                 bytes.data(), &peer_bytes);
        !filled.ok()) {
      return ToGrpcStatus(filled);
    }
    for (int64_t at = 0; at < static_cast<int64_t>(bytes.size());
         at += kSliceChunkBytes) {
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      v1::ReadSlicesResponse chunk;
      chunk.set_data(bytes.data() + at,
                     std::min<int64_t>(kSliceChunkBytes, bytes.size() - at));
      if (!writer->Write(chunk)) return grpc::Status::CANCELLED;
    }
  }
  v1::ReadSlicesResponse last;
  last.mutable_stats()->set_slice_bytes(read->slice_bytes);
  last.mutable_stats()->set_peer_bytes(peer_bytes);
  if (!writer->Write(last)) return grpc::Status::CANCELLED;
  return grpc::Status::OK;
}

}  // namespace summon::server
