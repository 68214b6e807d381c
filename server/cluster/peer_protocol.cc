#include "server/cluster/peer_protocol.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace summon::server {
namespace {

std::string Range(const PeerProtocol& p) {
  return p.oldest == p.newest ? absl::StrCat(p.newest)
                              : absl::StrCat(p.oldest, "..", p.newest);
}

std::string Release(const std::string& release) {
  return release.empty() ? "a release before versioned joins" : release;
}

// Fields unset (0): a sender of a release before the version, protocol 1.
PeerProtocol FromFields(uint32_t oldest, uint32_t newest) {
  if (newest == 0) return PeerProtocol{1, 1};
  return PeerProtocol{static_cast<int>(oldest == 0 ? newest : oldest),
                      static_cast<int>(newest)};
}

}  // namespace

absl::StatusOr<PeerProtocol> ParsePeerProtocol(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  PeerProtocol protocol;
  if (parts.size() > 2 || !absl::SimpleAtoi(parts.front(), &protocol.oldest) ||
      !absl::SimpleAtoi(parts.back(), &protocol.newest) ||
      protocol.oldest < 1 || protocol.newest < protocol.oldest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer protocol '", text, "' is not N or MIN:MAX with 1 <= MIN <= MAX"));
  }
  return protocol;
}

PeerProtocol ProtocolOf(const v1::JoinRequest& request) {
  return FromFields(request.oldest_protocol_version(),
                    request.protocol_version());
}

PeerProtocol ProtocolOf(const v1::JoinResponse& response) {
  return FromFields(response.oldest_protocol_version(),
                    response.protocol_version());
}

void SetProtocol(const PeerProtocol& protocol, v1::JoinRequest* request) {
  request->set_protocol_version(protocol.newest);
  request->set_oldest_protocol_version(protocol.oldest);
}

void SetProtocol(const PeerProtocol& protocol, v1::JoinResponse* response) {
  response->set_protocol_version(protocol.newest);
  response->set_oldest_protocol_version(protocol.oldest);
}

absl::Status CheckPeerProtocol(const PeerProtocol& leader, int leader_rank,
                               const std::string& leader_release,
                               const PeerProtocol& node, int node_rank,
                               const std::string& node_release) {
  if (node.oldest <= leader.newest && leader.oldest <= node.newest) {
    return absl::OkStatus();
  }
  const std::string what = absl::StrCat(
      "node ", node_rank, " (summond ", Release(node_release),
      ") speaks peer protocol ", Range(node), " and the leader, node ",
      leader_rank, " (summond ", Release(leader_release), "), speaks ",
      Range(leader), ": no version in common, node ", node_rank,
      " cannot join. ");
  if (node.newest < leader.oldest) {
    return absl::UnimplementedError(absl::StrCat(
        what, "Node ", node_rank,
        " is too old for this cluster: update it to the cluster's release"));
  }
  return absl::UnimplementedError(absl::StrCat(
      what, "Node ", node_rank,
      " is more than one release newer than the cluster: update the cluster "
      "one release at a time (each release still speaks the previous one's "
      "protocol), or run node ",
      node_rank, " on the cluster's release until the others are updated"));
}

}  // namespace summon::server
