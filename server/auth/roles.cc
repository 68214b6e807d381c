#include "server/auth/roles.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "summon/v1/summon.pb.h"

namespace summon::server::auth {
namespace {

constexpr Role kAllRoles[] = {Role::kViewer, Role::kEditor, Role::kTrainer,
                              Role::kAdmin, Role::kPeer};

// A session is writable unless the request says writeback = false (the
// proto's default is true).
bool OpensWritable(const google::protobuf::Message& request) {
  const auto* open = dynamic_cast<const v1::OpenSessionRequest*>(&request);
  return open != nullptr &&
         (!open->options().has_writeback() || open->options().writeback());
}

// Listing every session shows who holds what: an operator's view.
bool ListsAll(const google::protobuf::Message& request) {
  const auto* list = dynamic_cast<const v1::ListSessionsRequest*>(&request);
  return list != nullptr && list->all();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kEditor:
      return "editor";
    case Role::kTrainer:
      return "trainer";
    case Role::kAdmin:
      return "admin";
    case Role::kPeer:
      return "peer";
  }
  return "?";
}

absl::StatusOr<RoleSet> RoleSet::Parse(absl::string_view text) {
  RoleSet roles;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    name = absl::StripAsciiWhitespace(name);
    bool known = false;
    for (Role role : kAllRoles) {
      if (name == RoleName(role)) {
        roles.Add(role);
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown role '", name,
                       "' (roles: viewer, editor, trainer, admin, "
                       "peer)"));
    }
  }
  return roles;
}

bool RoleSet::Allows(Role role) const {
  const uint8_t want = static_cast<uint8_t>(role);
  if ((bits_ & want) != 0) return true;
  // admin covers the client-facing roles; a peer certificate never does.
  if (role != Role::kPeer && (bits_ & static_cast<uint8_t>(Role::kAdmin))) {
    return true;
  }
  return role == Role::kViewer &&
         (bits_ & static_cast<uint8_t>(Role::kEditor)) != 0;
}

std::string RoleSet::ToString() const {
  std::vector<const char*> names;
  for (Role role : kAllRoles) {
    if ((bits_ & static_cast<uint8_t>(role)) != 0) {
      names.push_back(RoleName(role));
    }
  }
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

const std::vector<RpcRule>& RpcTable() {
  static const auto* const kTable = new std::vector<RpcRule>{
      {"/summon.v1.Summon/ListModels", Role::kViewer},
      {"/summon.v1.Summon/DescribeModel", Role::kViewer},
      {"/summon.v1.Summon/CreateModel", Role::kAdmin},
      {"/summon.v1.Summon/LoadModel", Role::kAdmin},
      {"/summon.v1.Summon/SaveModel", Role::kAdmin},
      {"/summon.v1.Summon/ModelChecksum", Role::kViewer},
      {"/summon.v1.Summon/DeleteModel", Role::kAdmin},
      {"/summon.v1.Summon/OpenSession", Role::kViewer, OpensWritable,
       Role::kEditor, "a writable session (writeback unset or true)"},
      {"/summon.v1.Summon/GetSession", Role::kViewer},
      {"/summon.v1.Summon/ListSessions", Role::kViewer, ListsAll,
       Role::kAdmin, "every session (all)"},
      {"/summon.v1.Summon/RenewSession", Role::kViewer},
      // Closing needs no more than opening did: a writeback at close happens
      // only for a session that an editor opened writable.
      {"/summon.v1.Summon/CloseSession", Role::kViewer},
      {"/summon.v1.Summon/ReadTensor", Role::kViewer},
      {"/summon.v1.Summon/WriteTensor", Role::kEditor},
      {"/summon.v1.Summon/TensorStats", Role::kViewer},
      // Read-only sessions only (the handler refuses writable ones): a
      // viewer may read what the mapping shows through ReadTensor anyway.
      {"/summon.v1.Summon/MapSession", Role::kViewer},
      {"/summon.v1.Summon/AddWatch", Role::kEditor},
      {"/summon.v1.Summon/ListWatches", Role::kViewer},
      {"/summon.v1.Summon/RemoveWatch", Role::kEditor},
      {"/summon.v1.Summon/ShowWatch", Role::kViewer},
      {"/summon.v1.Summon/GetClusterStatus", Role::kViewer},
      // The trainer publishes what it trained; anyone who may read a
      // model's tensors may read its published versions.
      {"/summon.v1.Summon/Publish", Role::kTrainer},
      {"/summon.v1.Summon/WaitVersion", Role::kViewer},
      {"/summon.v1.Summon/ReadSlices", Role::kViewer},
      {"/summon.v1.Trainer/Attach", Role::kTrainer},
      {"/summon.v1.Trainer/Heartbeat", Role::kTrainer},
      {"/summon.v1.Trainer/Detach", Role::kTrainer},
      {"/summon.v1.Trainer/ReportPhase", Role::kTrainer},
      {"/summon.v1.Trainer/MapShards", Role::kTrainer},
      {"/summon.v1.Trainer/MarkInitialized", Role::kTrainer},
      {"/summon.v1.Trainer/WatchUnits", Role::kTrainer},
      {"/summon.v1.Peer/Join", Role::kPeer},
      {"/summon.v1.Peer/Heartbeat", Role::kPeer},
      {"/summon.v1.Peer/StoreSet", Role::kPeer},
      {"/summon.v1.Peer/StoreGet", Role::kPeer},
      {"/summon.v1.Peer/StoreWait", Role::kPeer},
      {"/summon.v1.Peer/NodeGather", Role::kPeer},
      {"/summon.v1.Peer/NodeWrite", Role::kPeer},
      {"/summon.v1.Peer/NodeRead", Role::kPeer},
      {"/summon.v1.Peer/NodeStats", Role::kPeer},
      {"/summon.v1.Peer/NodeWatchPartials", Role::kPeer},
      {"/summon.v1.Peer/NodeWatchVersions", Role::kPeer},
      {"/summon.v1.Peer/NodeWatchFetch", Role::kPeer},
      {"/summon.v1.Peer/NodeWatchApply", Role::kPeer},
      {"/summon.v1.Peer/NodePrepare", Role::kPeer},
      {"/summon.v1.Peer/NodeCommit", Role::kPeer},
      {"/summon.v1.Peer/NodeAbort", Role::kPeer},
      {"/summon.v1.Peer/NodeSetGenerations", Role::kPeer},
      {"/summon.v1.Peer/NodeRelease", Role::kPeer},
      {"/summon.v1.Peer/NodeCreateModel", Role::kPeer},
      {"/summon.v1.Peer/NodeLoadModel", Role::kPeer},
      {"/summon.v1.Peer/NodeChecksum", Role::kPeer},
      {"/summon.v1.Peer/NodeDeleteModel", Role::kPeer},
      {"/summon.v1.Peer/NodeSaveModel", Role::kPeer},
      {"/summon.v1.Peer/NodeHealth", Role::kPeer},
      {"/summon.v1.Peer/NodePublishVersion", Role::kPeer},
      {"/summon.v1.Peer/NodeReadVersion", Role::kPeer},
  };
  return *kTable;
}

const RpcRule* FindRpcRule(absl::string_view method) {
  for (const RpcRule& rule : RpcTable()) {
    if (method == rule.method) return &rule;
  }
  return nullptr;
}

Role RequiredRole(const RpcRule& rule,
                  const google::protobuf::Message& request) {
  if (rule.escalates != nullptr && rule.escalates(request)) {
    return rule.stronger;
  }
  return rule.role;
}

}  // namespace summon::server::auth
