#include "server/service/summon_service.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/checkpoint/checkpoint.h"
#include "server/metrics/summon_metrics.h"
#include "server/rpc/status_conversion.h"
#include "server/service/peer_service.h"
#include "server/service/proto_conversion.h"

namespace summon::server {

SummonServiceImpl::SummonServiceImpl(
    ModelRegistry* registry, SessionManager* sessions, TrainerLeases* trainers,
    const std::vector<std::string>& checkpoint_roots,
    const auth::Authorizer* authorizer, Membership* cluster,
    int max_open_streams, LocalFdBroker* fd_broker)
    : registry_(registry),
      sessions_(sessions),
      trainers_(trainers),
      checkpoint_roots_(checkpoint_roots),
      authorizer_(authorizer),
      cluster_(cluster),
      forwarder_(cluster, authorizer),
      max_open_streams_(max_open_streams),
      fd_broker_(fd_broker) {
  const int read_tensor = v1::ReadTensorRequest::descriptor()
                              ->file()
                              ->FindServiceByName("Summon")
                              ->FindMethodByName("ReadTensor")
                              ->index();
  MarkMethodStreamed(
      read_tensor,
      new grpc::internal::SplitServerStreamingHandler<v1::ReadTensorRequest,
                                                      grpc::ByteBuffer>(
          [this](grpc::ServerContext* context, ReadTensorStream* stream) {
            return StreamReadTensor(context, stream);
          }));
}

grpc::Status SummonServiceImpl::OpenSession(
    grpc::ServerContext* context, const v1::OpenSessionRequest* request,
    v1::Session* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/OpenSession", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          Route(*context, &v1::Summon::Stub::OpenSession, *request, response)) {
    return *routed;
  }
  // Counted where the session is decided: the leader (or single node).
  const metrics::SummonMetrics& m = metrics::Summon();
  const absl::Time start = absl::Now();
  absl::StatusOr<SessionOptions> options =
      SessionOptionsFromProto(request->options());
  // No session races a step the leader did not hear of (R1).
  if (options.ok()) {
    if (absl::Status known = trainers_->CheckInterlockKnown(request->model());
        !known.ok()) {
      options = known;
    }
  }
  // A gather is a collective: a follower without the model's shards would
  // refuse its part while the others wait in it until the collective
  // timeout, which breaks the communicator for every model. Refused here,
  // before any node starts.
  if (options.ok() && cluster_ != nullptr) {
    if (absl::Status missing = RefuseMissingOnFollowers(request->model());
        !missing.ok()) {
      options = missing;
    }
  }
  absl::StatusOr<SessionInfo> info =
      options.ok()
          ? sessions_->Open(request->model(), *options, PrincipalOf(*context))
          : absl::StatusOr<SessionInfo>(options.status());
  const grpc::Status status = ToGrpcStatus(info.status());
  m.session_opens->Add({metrics::CodeName(status.error_code())});
  if (!info.ok()) return status;
  m.gather_seconds->Observe({}, metrics::SecondsSince(start));
  if (!info->shared_gather) m.gathered_bytes->Add({}, info->bytes);
  SessionInfoToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::GetSession(grpc::ServerContext* context,
                                           const v1::GetSessionRequest* request,
                                           v1::Session* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/GetSession", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed =
          forwarder_.RouteOpenSession(*context, &v1::Summon::Stub::GetSession,
                                      *request, response)) {
    return *routed;
  }
  absl::StatusOr<SessionInfo> info =
      sessions_->Get(request->session_id(), PrincipalOf(*context));
  if (!info.ok()) return ToGrpcStatus(info.status());
  SessionInfoToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::ListSessions(
    grpc::ServerContext* context, const v1::ListSessionsRequest* request,
    v1::ListSessionsResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/ListSessions", *request);
      !denied.ok()) {
    return denied;
  }
  // A read-only listing: with a node down it answers from this node's
  // records instead of UNAVAILABLE. A cluster that left READY aborted every
  // session, so none is hidden by answering here.
  if (auto routed = forwarder_.RouteListing(
          *context, &v1::Summon::Stub::ListSessions, *request, response)) {
    return *routed;
  }
  if (!request->model().empty()) {
    absl::StatusOr<std::shared_ptr<ModelEntry>> model =
        registry_->Get(request->model());
    if (!model.ok()) return ToGrpcStatus(model.status());
  }
  for (const SessionInfo& info :
       sessions_->List(request->model(), PrincipalOf(*context),
                       request->all())) {
    SessionInfoToProto(info, response->add_sessions());
  }
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::RenewSession(
    grpc::ServerContext* context, const v1::RenewSessionRequest* request,
    v1::Session* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/RenewSession", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = forwarder_.RouteOpenSession(
          *context, &v1::Summon::Stub::RenewSession, *request, response)) {
    return *routed;
  }
  std::optional<absl::Duration> lease;
  if (request->has_lease_seconds()) {
    lease = absl::Seconds(request->lease_seconds());
  }
  absl::StatusOr<SessionInfo> info =
      sessions_->Renew(request->session_id(), lease, PrincipalOf(*context));
  if (!info.ok()) return ToGrpcStatus(info.status());
  SessionInfoToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status SummonServiceImpl::CloseSession(
    grpc::ServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  if (grpc::Status denied =
          Allow(*context, "/summon.v1.Summon/CloseSession", *request);
      !denied.ok()) {
    return denied;
  }
  if (auto routed = Route(*context, &v1::Summon::Stub::CloseSession, *request,
                          response)) {
    return *routed;
  }
  const metrics::SummonMetrics& m = metrics::Summon();
  const absl::Time start = absl::Now();
  absl::StatusOr<SessionInfo> before =
      sessions_->Get(request->session_id(), PrincipalOf(*context));
  const bool writeback =
      before.ok() && before->options.writeback && !request->abort();
  absl::StatusOr<CloseResult> result = sessions_->Close(
      request->session_id(), request->abort(), request->force(),
      PrincipalOf(*context), [context] { return context->IsCancelled(); });
  const std::string result_name =
      metrics::CodeName(ToGrpcStatus(result.status()).error_code());
  m.session_closes->Add({result_name});
  if (writeback) {
    m.writebacks->Add({result_name});
    m.writeback_seconds->Observe({}, metrics::SecondsSince(start));
  }
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->set_written_back(result->written_back);
  response->set_reason(result->reason);
  response->set_bytes_written(result->bytes_written);
  for (const auto& [unit, generation] : result->generations) {
    v1::UnitGeneration* entry = response->add_generations();
    entry->set_unit(unit);
    entry->set_generation(generation);
    entry->set_external_writes(result->external_writes[unit]);
  }
  return grpc::Status::OK;
}

}  // namespace summon::server
