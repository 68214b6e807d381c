// SummonClient's channel and call contexts: TLS and token credentials, the
// principal's metadata, deadlines. Its calls are spread over files by
// concern: summon_client_models.cc, summon_client_sessions.cc,
// summon_client_tensors.cc, summon_client_trainer.cc.
#include "client/lib/summon_client.h"

#include <malloc.h>

#include <memory>
#include <string>
#include <utility>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

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

}  // namespace summon::client
