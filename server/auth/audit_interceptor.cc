#include "server/auth/audit_interceptor.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message.h"
#include "server/rpc/status_conversion.h"

namespace summon::server::auth {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr const char* kAudited[] = {
    "/summon.v1.Summon/CreateModel",     "/summon.v1.Summon/LoadModel",
    "/summon.v1.Summon/SaveModel",       "/summon.v1.Summon/DeleteModel",
    "/summon.v1.Summon/WriteTensor",     "/summon.v1.Summon/CloseSession",
    "/summon.v1.Trainer/MarkInitialized"};

// A string field of `message` by name; "" when it has none.
std::string StringField(const google::protobuf::Message& message,
                        const char* name) {
  const google::protobuf::FieldDescriptor* field =
      message.GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
    return "";
  }
  return message.GetReflection()->GetString(message, field);
}

int64_t IntField(const google::protobuf::Message& message, const char* name) {
  const google::protobuf::FieldDescriptor* field =
      message.GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->is_repeated()) return 0;
  switch (field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return message.GetReflection()->GetInt64(message, field);
    case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<int64_t>(
          message.GetReflection()->GetUInt64(message, field));
    default:
      return 0;
  }
}

class AuditInterceptor final : public grpc::experimental::Interceptor {
 public:
  AuditInterceptor(grpc::experimental::ServerRpcInfo* info,
                   const Authorizer* authorizer)
      : info_(info), authorizer_(authorizer) {
    const std::string method = info->method();
    event_.action = method.substr(method.rfind('/') + 1);
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const auto* request = static_cast<const google::protobuf::Message*>(
              methods->GetRecvMessage())) {
        OnRequest(*request);
      }
    }
    // ReadTensor's replies are raw grpc::ByteBuffers, not messages
    // (server/summon_service_tensors.cc), and count no bytes here.
    if (event_.action != "ReadTensor" &&
        methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (const auto* response = static_cast<const google::protobuf::Message*>(
              methods->GetSendMessage())) {
        event_.bytes += IntField(*response, "bytes_read") +
                        IntField(*response, "bytes_written");
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // A close that wrote nothing back (read-only, aborted) changed
      // nothing worth auditing.
      const bool closed_without_writeback =
          status.ok() && event_.action == "CloseSession" && event_.bytes == 0;
      // A refusal at the role gate has its line from the Authorizer; any
      // other refusal (a checkpoint path outside the roots, R20) is the
      // handler's, and audited here like every other outcome.
      const bool refusal =
          status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
          status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
      const bool audited_at_gate = refusal && (!saw_request_ || gate_refused_);
      if (!audited_at_gate && !closed_without_writeback) {
        event_.result =
            absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message());
        const auto* context =
            dynamic_cast<const grpc::ServerContext*>(info_->server_context());
        absl::StatusOr<Caller> caller =
            context != nullptr ? authorizer_->Identify(*context)
                               : absl::StatusOr<Caller>(absl::UnknownError(""));
        event_.principal = caller.ok() ? caller->principal : "unknown";
        authorizer_->Audit(event_);
      }
    }
    methods->Proceed();
  }

 private:
  void OnRequest(const google::protobuf::Message& request) {
    if (!saw_request_) {
      saw_request_ = true;
      const auto* context =
          dynamic_cast<const grpc::ServerContext*>(info_->server_context());
      gate_refused_ =
          context == nullptr ||
          !authorizer_->Decide(*context, info_->method(), request).ok();
    }
    if (event_.model.empty()) event_.model = ModelOf(request);
    if (event_.scope.empty()) event_.scope = StringField(request, "path");
    if (event_.scope.empty()) event_.scope = StringField(request, "session_id");
    // WriteTensor: a header naming the tensor, then data messages.
    const google::protobuf::FieldDescriptor* header =
        request.GetDescriptor()->FindFieldByName("header");
    if (header != nullptr &&
        request.GetReflection()->HasField(request, header)) {
      const google::protobuf::Message& fields =
          request.GetReflection()->GetMessage(request, header);
      event_.scope = absl::StrCat(StringField(fields, "session_id"), "/",
                                  StringField(fields, "fqn"));
    }
    // The payload's size without copying it (GetString would).
    if (const google::protobuf::FieldDescriptor* data =
            request.GetDescriptor()->FindFieldByName("data");
        data != nullptr && !data->is_repeated() &&
        request.GetReflection()->HasField(request, data)) {
      std::string scratch;
      event_.bytes +=
          static_cast<int64_t>(request.GetReflection()
                                   ->GetStringReference(request, data, &scratch)
                                   .size());
    }
  }

  grpc::experimental::ServerRpcInfo* const info_;
  const Authorizer* const authorizer_;
  AuditEvent event_;
  // Whether a request arrived, and whether the Authorizer's gate refuses
  // it (decided on the first message, as the handler's gate does).
  bool saw_request_ = false;
  bool gate_refused_ = false;
};

}  // namespace

grpc::experimental::Interceptor*
AuditInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  bool audited = false;
  for (const char* method : kAudited) {
    audited |= absl::string_view(info->method()) == method;
  }
  if (!audited || !decides_()) return nullptr;
  return new AuditInterceptor(info, authorizer_);
}

}  // namespace summon::server::auth
