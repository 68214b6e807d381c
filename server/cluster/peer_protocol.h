#ifndef SUMMON_SERVER_CLUSTER_PEER_PROTOCOL_H_
#define SUMMON_SERVER_CLUSTER_PEER_PROTOCOL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "summon/v1/peer.pb.h"

namespace summon::server {

// The versions of the Peer protocol (proto/summon/v1/peer.proto and what the
// nodes expect of each other) a summond speaks, oldest..newest. A release
// that changes the protocol raises `newest` and keeps speaking the previous
// release's version (its `oldest`), so during a rolling update a node one
// release newer joins a cluster of the previous release: two nodes work
// together when their ranges overlap, the cluster speaking the newest
// version every member speaks. Protocol 1 is the first; releases before the
// Join carried a version spoke it.
struct PeerProtocol {
  int oldest = 1;
  int newest = 1;
};

inline constexpr PeerProtocol kPeerProtocol{1, 1};

// "MIN:MAX" or "N" (summond's --testing-peer-protocol, which rehearses a
// rolling update across releases); INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<PeerProtocol> ParsePeerProtocol(const std::string& text);

// What a JoinRequest / JoinResponse says its sender speaks; a sender of a
// release before the version (the fields unset) speaks protocol 1.
PeerProtocol ProtocolOf(const v1::JoinRequest& request);
PeerProtocol ProtocolOf(const v1::JoinResponse& response);
void SetProtocol(const PeerProtocol& protocol, v1::JoinRequest* request);
void SetProtocol(const PeerProtocol& protocol, v1::JoinResponse* response);

// OK when `leader` and the joining `node` share a version; otherwise
// UNIMPLEMENTED (the code summond's Join answers it with, which a joining
// node reports) saying which side is older and what the operator does.
// `node_rank`/`node_release` and `leader_rank`/`leader_release` name them.
absl::Status CheckPeerProtocol(const PeerProtocol& leader, int leader_rank,
                               const std::string& leader_release,
                               const PeerProtocol& node, int node_rank,
                               const std::string& node_release);

}  // namespace summon::server

#endif  // SUMMON_SERVER_CLUSTER_PEER_PROTOCOL_H_
