#ifndef SUMMON_SERVER_AUTH_ROLES_H_
#define SUMMON_SERVER_AUTH_ROLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace summon::server::auth {

// What a principal may do. Roles are granted one by one (a tokens-file entry
// lists them); admin implies every role but peer, editor implies viewer.
enum class Role : uint8_t {
  kViewer = 1 << 0,   // list, describe, read-only sessions, reads, stats
  kEditor = 1 << 1,   // + writable sessions, writes, close with writeback
  kTrainer = 1 << 2,  // the Trainer service, for its models
  kAdmin = 1 << 3,    // create, load, save, delete; any session (R12)
  kPeer = 1 << 4,     // another summond of the cluster: the Peer service
};

class RoleSet {
 public:
  RoleSet() = default;
  static RoleSet All() { return RoleSet(0x1f); }
  // Parses "viewer,editor"; INVALID_ARGUMENT naming an unknown role.
  static absl::StatusOr<RoleSet> Parse(absl::string_view text);

  RoleSet& Add(Role role) {
    bits_ |= static_cast<uint8_t>(role);
    return *this;
  }
  // Whether `role` itself was granted (no implications).
  bool Has(Role role) const {
    return (bits_ & static_cast<uint8_t>(role)) != 0;
  }
  // Whether this set allows what `role` allows (the implications above).
  bool Allows(Role role) const;
  bool empty() const { return bits_ == 0; }
  // "editor,viewer"-style, in the enum's order; "none" when empty.
  std::string ToString() const;
  bool operator==(const RoleSet& other) const { return bits_ == other.bits_; }

 private:
  explicit RoleSet(uint8_t bits) : bits_(bits) {}
  uint8_t bits_ = 0;
};

const char* RoleName(Role role);

// One row of the authorisation table: the role an RPC needs, and for the
// few whose need depends on the request, the stronger role it needs then.
struct RpcRule {
  const char* method;  // full name, "/summon.v1.Summon/OpenSession"
  Role role;
  // When set and true for the request: `stronger` is needed instead.
  bool (*escalates)(const google::protobuf::Message& request) = nullptr;
  Role stronger = Role::kViewer;
  const char* escalation = "";  // what makes it stronger, for messages
};

// Every RPC of summon.v1.Summon, summon.v1.Trainer and summon.v1.Peer.
const std::vector<RpcRule>& RpcTable();
// The row for `method`; null for a method outside the table (health,
// reflection: open to anyone who passed the transport's checks).
const RpcRule* FindRpcRule(absl::string_view method);
// The role `request` needs under `rule`.
Role RequiredRole(const RpcRule& rule,
                  const google::protobuf::Message& request);

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_ROLES_H_
