#ifndef SUMMON_SERVER_AUTH_AUDIT_INTERCEPTOR_H_
#define SUMMON_SERVER_AUTH_AUDIT_INTERCEPTOR_H_

#include <functional>

#include "grpcpp/support/server_interceptor.h"
#include "server/auth/authorizer.h"

namespace summon::server::auth {

// Audits every call that changes shards or models: CreateModel and
// Trainer.MarkInitialized (init), LoadModel, SaveModel, DeleteModel,
// WriteTensor and CloseSession (writeback), with the caller, the model, the
// scope (checkpoint path or session/tensor), the bytes moved and the final
// status. An interceptor sees every call's request, response and status in
// one place, so no handler carries audit code. Refusals at the role gate
// are audited by the Authorizer itself (for every RPC) and skipped here;
// refusals past the gate (a checkpoint path outside the roots) are audited
// here. Calls this node only forwards (`decides` false: a follower) are the
// leader's to audit.
class AuditInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AuditInterceptorFactory(const Authorizer* authorizer,
                          std::function<bool()> decides)
      : authorizer_(authorizer), decides_(std::move(decides)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const Authorizer* const authorizer_;
  const std::function<bool()> decides_;
};

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_AUDIT_INTERCEPTOR_H_
