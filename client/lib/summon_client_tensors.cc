// SummonClient: the tensor streams (ReadTensor, WriteTensor, checked chunk
// by chunk under an idle timeout), tensor statistics and the same-node
// MapSession. FindTensor and the whole-write rule are tensor_lookup.cc.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/lib/stream_watchdog.h"
#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"
#include "client/lib/tensor_lookup.h"
#include "client/lib/wire_dtype.h"
#include "grpcpp/client_context.h"
#include "memory/fresh_memory.h"
#include "proto/read_chunk_wire.h"

namespace summon::client {
namespace {

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

}  // namespace summon::client
