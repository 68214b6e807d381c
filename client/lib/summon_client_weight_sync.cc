// SummonClient's weight-sync calls: Publish, WaitVersion, ReadSlices.

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"
#include "client/lib/stream_watchdog.h"

namespace summon::client {
namespace {

// A SliceBuffer too small for the announced answer, naming the first entry
// that does not fit (as the daemon does for a buffer it was handed).
absl::Status TooSmall(const v1::ReadSlicesResponse& header,
                      const v1::ReadSlicesRequest& request, int64_t capacity) {
  const int64_t size = kSliceBufferHeaderBytes + capacity;
  const int64_t needed = kSliceBufferHeaderBytes + header.total_bytes();
  for (int i = 0; i < header.entries_size(); ++i) {
    const int64_t end = kSliceBufferHeaderBytes + header.entries(i).offset() +
                        header.entries(i).bytes();
    if (end > size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", i, " ('", request.entries(i).fqn(), "'): ends at byte ",
          end, " of the slice buffer, which has ", size,
          " bytes (the answer needs ", needed,
          ": a 64-byte header and the packed entries)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the slice buffer has ", size, " bytes; the answer needs ", needed));
}

}  // namespace

absl::StatusOr<v1::PublishResponse> SummonClient::Publish(
    const std::string& model, int64_t step) const {
  v1::PublishRequest request;
  request.set_model(model);
  request.set_step(step);
  return Unary(*summon_, &v1::Summon::Stub::Publish, NewContext(), request);
}

absl::StatusOr<int64_t> SummonClient::WaitVersion(const std::string& model,
                                                  int64_t min_step,
                                                  absl::Duration timeout) const {
  v1::WaitVersionRequest request;
  request.set_model(model);
  request.set_min_step(min_step);
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context = NewContext();
  if (context.ok()) {
    (*context)->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  absl::StatusOr<v1::WaitVersionResponse> response = Unary(
      *summon_, &v1::Summon::Stub::WaitVersion, std::move(context), request);
  if (!response.ok()) return response.status();
  return response->version();
}

absl::StatusOr<SlicesData> SummonClient::ReadSlices(
    const v1::ReadSlicesRequest& request, SliceBuffer* into) const {
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context =
      NewStreamContext();
  if (!context.ok()) return context.status();
  StreamWatchdog watchdog(context->get(), options_.timeout);
  v1::ReadSlicesRequest asked = request;
  if (into != nullptr && local_slices_->load()) asked.set_local_buffer(true);
  std::unique_ptr<grpc::ClientReader<v1::ReadSlicesResponse>> reader =
      summon_->ReadSlices(context->get(), asked);
  SlicesData data;
  v1::ReadSlicesResponse header;
  v1::ReadSlicesResponse message;
  bool first = true;
  int64_t received = 0;
  absl::Status refused;  // Ours: the stream is cancelled, then reported.
  while (refused.ok() && reader->Read(&message)) {
    watchdog.Progress();
    if (first) {
      header = message;
      data.entries.assign(message.entries().begin(), message.entries().end());
      first = false;
      if (into == nullptr) {
        data.packed.reserve(header.total_bytes());
      } else if (header.total_bytes() > into->capacity()) {
        refused = TooSmall(header, request, into->capacity());
      } else if (!header.buffer_token().empty()) {
        refused =
            into->HandOver(header.buffer_socket(), header.buffer_token());
        data.local_buffer = true;
        if (absl::IsUnavailable(refused)) {
          // Out of reach from here: this answer is abandoned, and it and
          // every later one come as a stream.
          local_slices_->store(false);
          (*context)->TryCancel();
          reader->Finish().ok();
          return ReadSlices(request, into);
        }
      } else {
        into->Begin(request.version(), header.total_bytes(),
                    header.entries_size());
      }
      continue;
    }
    if (message.has_stats()) data.stats = message.stats();
    const std::string& bytes = message.data();
    if (bytes.empty()) continue;
    if (into == nullptr) {
      data.packed.append(bytes);
    } else if (data.local_buffer ||
               static_cast<int64_t>(bytes.size()) >
                   header.total_bytes() - received) {
      refused = absl::InternalError("ReadSlices sent unannounced data");
    } else {
      std::memcpy(into->mutable_packed() + received, bytes.data(),
                  bytes.size());
    }
    received += static_cast<int64_t>(bytes.size());
  }
  if (!refused.ok()) {
    (*context)->TryCancel();
    reader->Finish().ok();
    return refused;
  }
  const grpc::Status status = reader->Finish();
  if (watchdog.fired()) {
    return absl::DeadlineExceededError(
        absl::StrCat("ReadSlices stream idle for ",
                     absl::FormatDuration(options_.timeout)));
  }
  if (!status.ok()) return FromGrpcStatus(status);
  if (data.local_buffer) {
    // The daemon vouches for the bytes by its header: complete, this
    // call's, this answer's size.
    if (into->magic() != absl::string_view("SUMSLICE", 8) ||
        !into->complete() ||
        into->call() != header.buffer_token().substr(0, 8) ||
        into->total_bytes() != header.total_bytes()) {
      return absl::DataLossError("ReadSlices ended without a complete buffer");
    }
    return data;
  }
  if (received != header.total_bytes()) {
    return absl::DataLossError(absl::StrCat(
        "ReadSlices sent ", received, " of ", header.total_bytes(), " bytes"));
  }
  if (into != nullptr) into->Complete();
  return data;
}

}  // namespace summon::client
