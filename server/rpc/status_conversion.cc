#include "server/rpc/status_conversion.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace summon::server {

namespace {

// Messages travel in trailing metadata, which gRPC caps (8 KiB by default);
// a message quoting a huge bad input would turn into RESOURCE_EXHAUSTED.
constexpr size_t kMaxMessageBytes = 2048;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxMessageBytes) {
    const size_t elided = message.size() - kMaxMessageBytes;
    message = absl::StrCat(message.substr(0, kMaxMessageBytes), "... (", elided,
                           " more bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.raw_code()),
                      std::move(message));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace summon::server
