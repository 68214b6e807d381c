// SummonClient's weight-sync calls: Publish, WaitVersion, ReadSlices.

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"
#include "client/lib/stream_watchdog.h"

namespace summon::client {

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
    const v1::ReadSlicesRequest& request) const {
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> context =
      NewStreamContext();
  if (!context.ok()) return context.status();
  StreamWatchdog watchdog(context->get(), options_.timeout);
  std::unique_ptr<grpc::ClientReader<v1::ReadSlicesResponse>> reader =
      summon_->ReadSlices(context->get(), request);
  SlicesData data;
  v1::ReadSlicesResponse message;
  bool first = true;
  int64_t total = 0;
  while (reader->Read(&message)) {
    watchdog.Progress();
    if (first) {
      data.entries.assign(message.entries().begin(), message.entries().end());
      total = message.total_bytes();
      data.packed.reserve(total);
      first = false;
      continue;
    }
    data.packed.append(message.data());
    if (message.has_stats()) data.stats = message.stats();
  }
  const grpc::Status status = reader->Finish();
  if (watchdog.fired()) {
    return absl::DeadlineExceededError(
        absl::StrCat("ReadSlices stream idle for ",
                     absl::FormatDuration(options_.timeout)));
  }
  if (!status.ok()) return FromGrpcStatus(status);
  if (static_cast<int64_t>(data.packed.size()) != total) {
    return absl::DataLossError(absl::StrCat("ReadSlices sent ",
                                            data.packed.size(), " of ", total,
                                            " bytes"));
  }
  return data;
}

}  // namespace summon::client
