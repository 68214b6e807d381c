#include "server/rpc/reflection_v1.h"

#include <set>
#include <utility>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace summon::server {
namespace {

namespace v1 = ::grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// `file` and, before it, every file it imports (each once), serialized.
void AddFileWithImports(const FileDescriptor* file, std::set<std::string>& sent,
                        v1::FileDescriptorResponse* out) {
  if (!sent.insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileWithImports(file->dependency(i), sent, out);
  }
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void SetError(grpc::StatusCode code, const std::string& message,
              v1::ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

}  // namespace

ReflectionV1Service::ReflectionV1Service(std::vector<std::string> services)
    : services_(std::move(services)) {}

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<v1::ServerReflectionResponse,
                             v1::ServerReflectionRequest>* stream) {
  v1::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    if (!stream->Write(Answer(request))) break;
  }
  return grpc::Status::OK;
}

v1::ServerReflectionResponse ReflectionV1Service::Answer(
    const v1::ServerReflectionRequest& request) const {
  v1::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  std::set<std::string> sent;
  switch (request.message_request_case()) {
    case v1::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(
            name);
      }
      break;
    case v1::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file =
          pool.FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "File not found.", &response);
        break;
      }
      AddFileWithImports(file, sent,
                         response.mutable_file_descriptor_response());
      break;
    }
    case v1::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file =
          pool.FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Symbol not found.", &response);
        break;
      }
      AddFileWithImports(file, sent,
                         response.mutable_file_descriptor_response());
      break;
    }
    case v1::ServerReflectionRequest::kFileContainingExtension: {
      const auto* type = pool.FindMessageTypeByName(
          request.file_containing_extension().containing_type());
      const auto* extension =
          type == nullptr
              ? nullptr
              : pool.FindExtensionByNumber(
                    type,
                    request.file_containing_extension().extension_number());
      if (extension == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Extension not found.",
                 &response);
        break;
      }
      AddFileWithImports(extension->file(), sent,
                         response.mutable_file_descriptor_response());
      break;
    }
    case v1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type =
          pool.FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Type not found.", &response);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool.FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* extension : extensions) {
        numbers->add_extension_number(extension->number());
      }
      break;
    }
    case v1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::UNIMPLEMENTED, "No request given.", &response);
      break;
  }
  return response;
}

}  // namespace summon::server
