#ifndef SUMMON_SERVER_RPC_REFLECTION_V1_H_
#define SUMMON_SERVER_RPC_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace summon::server {

// grpc.reflection.v1.ServerReflection, which current grpcurl, grpcui and
// Postman ask before v1alpha (the only version libgrpc++_reflection 1.51
// serves). Answers from the process's generated descriptor pool: every file
// is sent with the files it imports, so a client without .proto files can
// build every message and method of the listed services.
class ReflectionV1Service final
    : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the full names `list_services` answers with.
  explicit ReflectionV1Service(std::vector<std::string> services);

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>*
          stream) override;

 private:
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

  const std::vector<std::string> services_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_RPC_REFLECTION_V1_H_
