#include "server/auth/authorizer.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/rpc/status_conversion.h"

namespace summon::server::auth {
namespace {

std::string FirstProperty(const grpc::AuthContext& context, const char* name) {
  std::vector<grpc::string_ref> values = context.FindPropertyValues(name);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

std::string MetadataValue(const grpc::ServerContext& context,
                          absl::string_view key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::vector<std::string> SplitList(absl::string_view text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

}  // namespace

std::string ModelOf(const google::protobuf::Message& request) {
  // CreateModel names the model it makes `name`; every other request that
  // concerns one model calls it `model`.
  const google::protobuf::FieldDescriptor* field =
      request.GetDescriptor()->FindFieldByName(
          request.GetDescriptor()->full_name() == "summon.v1.CreateModelRequest"
              ? "name"
              : "model");
  if (field == nullptr ||
      field->type() != google::protobuf::FieldDescriptor::TYPE_STRING ||
      field->is_repeated()) {
    return "";
  }
  return request.GetReflection()->GetString(request, field);
}

namespace {

absl::string_view ShortName(absl::string_view method) {
  return method.substr(method.rfind('/') + 1);
}

}  // namespace

grpc::Status CredentialProcessor::Process(
    const InputMetadata& auth_metadata, grpc::AuthContext* context,
    OutputMetadata* consumed_auth_metadata, OutputMetadata*) {
  std::optional<Grant> grant;
  std::shared_ptr<const TokenTable> table =
      tokens_ != nullptr ? tokens_->table() : nullptr;
  // A client certificate reaches here only verified (--tls-client-ca).
  std::vector<std::string> names;
  for (const char* property :
       {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const grpc::string_ref& value :
         context->FindPropertyValues(property)) {
      names.emplace_back(value.data(), value.size());
    }
  }
  for (const std::string& name : names) {
    if (std::find(peer_hosts_.begin(), peer_hosts_.end(), name) !=
        peer_hosts_.end()) {
      grant.emplace();
      grant->principal = absl::StrCat("peer:", name);
      grant->roles.Add(Role::kPeer);
      break;
    }
    if (table != nullptr) {
      if ((grant = table->FindCertificate(name))) break;
    }
  }
  // A certificate nobody granted anything still names who is calling.
  if (!grant && !names.empty()) {
    grant.emplace();
    grant->principal = names.front();
  }

  auto authorization = auth_metadata.find("authorization");
  if (authorization != auth_metadata.end()) {
    absl::string_view value(authorization->second.data(),
                            authorization->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ")) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the authorization metadata must be "
                          "'Bearer <token>'");
    }
    Grant from_token;
    const TokenTable::Lookup found =
        table == nullptr ? TokenTable::Lookup::kUnknown
                         : table->FindToken(value, absl::Now(), &from_token);
    if (found == TokenTable::Lookup::kUnknown) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          table == nullptr
                              ? "bearer token given but this daemon has no "
                                "tokens file (--tokens)"
                              : "unknown bearer token");
    }
    if (found == TokenTable::Lookup::kExpired) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the bearer token has expired");
    }
    grant = std::move(from_token);
    consumed_auth_metadata->insert(
        std::make_pair(std::string("authorization"),
                       std::string(authorization->second.data(),
                                   authorization->second.size())));
  }
  if (grant) {
    context->AddProperty(kPrincipalProperty, grant->principal);
    context->AddProperty(kRolesProperty, grant->roles.ToString());
    context->AddProperty(kModelsProperty, absl::StrJoin(grant->models, ","));
    context->SetPeerIdentityPropertyName(kPrincipalProperty);
  }
  return grpc::Status::OK;
}

absl::StatusOr<Caller> Authorizer::Identify(
    const grpc::ServerContext& context) const {
  Caller caller;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  const std::string principal =
      auth != nullptr ? FirstProperty(*auth, kPrincipalProperty) : "";
  if (!principal.empty()) {
    caller.principal = principal;
    absl::StatusOr<RoleSet> roles =
        RoleSet::Parse(FirstProperty(*auth, kRolesProperty) == "none"
                           ? ""
                           : FirstProperty(*auth, kRolesProperty));
    if (roles.ok()) caller.roles = *roles;
    caller.models = SplitList(FirstProperty(*auth, kModelsProperty));
  } else if (!in_process_key_.empty() &&
             MetadataValue(context, kInProcessKeyHeader) == in_process_key_ &&
             !MetadataValue(context, kPrincipalHeader).empty()) {
    // The web view, for a viewer it identified (IdentifyToken).
    caller.principal = MetadataValue(context, kPrincipalHeader);
    absl::StatusOr<RoleSet> roles =
        RoleSet::Parse(MetadataValue(context, kForwardedRolesHeader));
    if (roles.ok()) caller.roles = *roles;
    caller.models = SplitList(MetadataValue(context, kForwardedModelsHeader));
    return caller;
  } else if (spec_.insecure_local) {
    caller.principal = MetadataValue(context, kPrincipalHeader);
    if (caller.principal.empty()) caller.principal = "anonymous";
    caller.roles = RoleSet::All();
    return caller;
  } else {
    return absl::UnauthenticatedError(
        "no credentials: present a bearer token (summonctl --token-file) or "
        "a client certificate");
  }
  // A peer speaks for the client whose call it forwards.
  const std::string forwarded = MetadataValue(context, kPrincipalHeader);
  if (caller.roles.Has(Role::kPeer) && !forwarded.empty()) {
    Caller client;
    client.principal = forwarded;
    absl::StatusOr<RoleSet> roles =
        RoleSet::Parse(MetadataValue(context, kForwardedRolesHeader));
    if (roles.ok()) client.roles = *roles;
    client.models = SplitList(MetadataValue(context, kForwardedModelsHeader));
    return client;
  }
  return caller;
}

absl::StatusOr<Caller> Authorizer::IdentifyToken(
    absl::string_view token) const {
  std::shared_ptr<const TokenTable> table =
      tokens_ != nullptr ? tokens_->table() : nullptr;
  if (table == nullptr) {
    return absl::UnauthenticatedError(
        "bearer token given but this daemon has no tokens file (--tokens)");
  }
  Grant grant;
  switch (table->FindToken(token, absl::Now(), &grant)) {
    case TokenTable::Lookup::kUnknown:
      return absl::UnauthenticatedError("unknown bearer token");
    case TokenTable::Lookup::kExpired:
      return absl::UnauthenticatedError("the bearer token has expired");
    case TokenTable::Lookup::kFound:
      break;
  }
  Caller caller;
  caller.principal = grant.principal;
  caller.roles = grant.roles;
  caller.models = grant.models;
  return caller;
}

std::string Authorizer::NewInProcessKey() {
  std::random_device device;
  std::string key;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&key, absl::Hex(device(), absl::kZeroPad8));
  }
  return key;
}

absl::StatusOr<Caller> Authorizer::Authorize(
    const grpc::ServerContext& context, absl::string_view method,
    const google::protobuf::Message& request) const {
  absl::StatusOr<Caller> decided = Decide(context, method, request);
  if (decided.ok()) return decided;
  absl::StatusOr<Caller> caller = Identify(context);
  Audit({caller.ok() ? caller->principal : "unauthenticated",
         std::string(ShortName(method)), ModelOf(request), "", 0,
         decided.status()});
  return decided;
}

absl::StatusOr<Caller> Authorizer::Decide(
    const grpc::ServerContext& context, absl::string_view method,
    const google::protobuf::Message& request) const {
  const std::string model = ModelOf(request);
  absl::StatusOr<Caller> caller = Identify(context);
  absl::Status refusal;
  if (!caller.ok()) {
    refusal = caller.status();
  } else if (const RpcRule* rule = FindRpcRule(method); rule == nullptr) {
    // A summon RPC missing from the table is a bug; refuse rather than open.
    refusal = absl::PermissionDeniedError(
        absl::StrCat(method, " is not in the authorisation table"));
  } else if (const Role needed = RequiredRole(*rule, request);
             !caller->roles.Allows(needed)) {
    const bool escalated = needed != rule->role;
    refusal = absl::PermissionDeniedError(absl::StrCat(
        "principal '", caller->principal, "' (roles: ",
        caller->roles.ToString(), ") may not call ", ShortName(method),
        escalated ? absl::StrCat(" for ", rule->escalation) : "",
        ": it needs the ", RoleName(needed), " role"));
  } else if (!caller->models.empty() && !model.empty() &&
             std::find(caller->models.begin(), caller->models.end(), model) ==
                 caller->models.end()) {
    refusal = absl::PermissionDeniedError(absl::StrCat(
        "principal '", caller->principal, "' may not touch model '", model,
        "' (its credentials cover: ", absl::StrJoin(caller->models, ", "),
        ")"));
  }
  if (refusal.ok()) return caller;
  return refusal;
}

bool Authorizer::IsAdmin(const std::string& principal) const {
  if (std::find(spec_.admins.begin(), spec_.admins.end(), principal) !=
      spec_.admins.end()) {
    return true;
  }
  if (tokens_ == nullptr) return false;
  std::shared_ptr<const TokenTable> table = tokens_->table();
  return table != nullptr &&
         table->Grants(principal, Role::kAdmin, absl::Now());
}

grpc::Status CheckCall(const Authorizer& authorizer,
                       const grpc::ServerContext& context,
                       absl::string_view method,
                       const google::protobuf::Message& request,
                       Caller* caller) {
  absl::StatusOr<Caller> allowed =
      authorizer.Authorize(context, method, request);
  if (!allowed.ok()) return ToGrpcStatus(allowed.status());
  if (caller != nullptr) *caller = std::move(*allowed);
  return grpc::Status::OK;
}

std::string PrincipalOf(const Authorizer& authorizer,
                        const grpc::ServerContext& context) {
  absl::StatusOr<Caller> caller = authorizer.Identify(context);
  return caller.ok() ? caller->principal : "anonymous";
}

}  // namespace summon::server::auth
