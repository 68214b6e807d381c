#ifndef SUMMON_SERVER_CLUSTER_MEMBERSHIP_H_
#define SUMMON_SERVER_CLUSTER_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/peer_protocol.h"
#include "server/comm/communicator.h"
#include "server/coordinator/coordinator.h"
#include "summon/v1/peer.grpc.pb.h"

namespace summon::server {

// A cluster of summond nodes (the same --nodes list everywhere). Who leads:
// in the static mode node 0, always; on a coordinator (etcd), the node the
// coordinator elected, under the epoch it began (any node may lead).
// Followers join the leader; once every node has joined (static), or every
// node the coordinator lists as alive has joined and heartbeats (etcd: the
// survivors, at least the leader itself), the leader begins an epoch whose
// members are those nodes, every member builds its Gloo communicator over
// the members through the rendezvous store (the leader's in-memory one when
// static, the coordinator's records of the epoch on etcd) and the cluster
// is READY. Until then health reports NOT_SERVING and operations answer
// UNAVAILABLE. A node that comes back makes the leader re-form with it.
class Membership {
 public:
  struct Spec {
    int node_rank = 0;
    std::vector<std::string> nodes;  // HOST:PORT of every node.
    int local_ranks = 1;
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration collective_timeout = absl::Seconds(30);
    // A peer silent this long is declared failed (R13).
    absl::Duration failure_timeout = absl::Seconds(3);
    // How this node dials its peers (TLS and its peer identity); null:
    // plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Builds the communicator that gathers session copies in device memory
    // (NCCL, on GPU nodes) through the same rendezvous as Gloo, under a
    // prefix of its own; null: none. Every node of a cluster must have one or
    // none: a gather uses it only where every node does.
    DeviceCommunicatorFactory device_communicator;
    // The cluster's coordinator (started by the caller, outliving the
    // membership); null: the static mode, node 0 leads.
    Coordinator* coordinator = nullptr;
    // The Peer protocol versions this node speaks (joins check them).
    PeerProtocol protocol = kPeerProtocol;
  };

  // `store` is the leader's key-value store (used on the leader only).
  Membership(Spec spec, LocalKvStore* store);
  ~Membership();  // Stops the background thread.

  // Starts joining (followers) / waiting for joins (leader) and then the
  // communicator rendezvous, in a background thread. `on_ready` runs once
  // the cluster is READY. `on_failure` runs once when a peer is lost (the
  // leader: a follower missed heartbeats for failure_timeout; a follower:
  // the leader did not answer for as long): the cluster leaves READY, the
  // communicator is aborted so no collective waits for the lost node, and
  // the status names the node.
  void Start(std::function<absl::Status()> on_ready,
             std::function<void(const absl::Status&)> on_failure);

  // This node leads the formed cluster (static: node 0; on a coordinator:
  // the elected node, and only while its leadership is provably valid).
  bool is_leader() const;
  // The node that leads the cluster as this node knows it (the one
  // followers forward to).
  int leader() const;
  // OK while this node may act as the leader: always in the static mode; on
  // a coordinator, UNAVAILABLE once its leadership lapsed (its lease could
  // have expired), before anything is sent or applied.
  absl::Status CheckLeading() const;
  // OK where this node may serve reads of sessions already open: as
  // CheckReady, and also on a leader held without a coordinator quorum
  // (Coordinator::HeldWithoutQuorum), which refuses everything else.
  absl::Status CheckServingReads() const;
  // This node leads the formed cluster, whether or not it may act now
  // (the node that decides the calls it gets rather than forwarding them).
  bool formed_as_leader() const;
  int node_rank() const { return spec_.node_rank; }
  int size() const { return static_cast<int>(spec_.nodes.size()); }
  bool ready() const;
  // UNAVAILABLE naming the nodes not yet joined when not READY.
  absl::Status CheckReady() const;
  // Leader: re-forms the cluster under a new epoch (new communicators) when
  // `epoch` is still the current one. A failed collective leaves a node's
  // communicator broken for good while every node still heartbeats, so
  // nothing else would start a new epoch. Does nothing on a follower, on a
  // lapsed leader, or once the epoch has moved on (once per epoch).
  void Reform(uint64_t epoch, const absl::Status& reason);
  // The communicator between nodes; valid once READY.
  Communicator* communicator() const;
  // The device communicator (Spec::device_communicator), valid once READY;
  // null without a factory.
  Communicator* device_communicator() const;
  // The Peer and Summon stubs' channel to a node (cached).
  std::shared_ptr<grpc::Channel> ChannelTo(int node);

  // The member nodes of the current epoch, ascending (static: every node).
  std::vector<int> Members() const;
  // The nodes of the --nodes list outside the current epoch (etcd: lost, not
  // back yet); plans over the survivors leave them out.
  std::set<int> AbsentNodes() const;
  // Members of the current epoch that were not members of the last epoch
  // this node saw READY (nodes that came back): their shards may be older
  // than a replica's and catch up before anything is served. Empty on the
  // first formation this node takes part in.
  std::set<int> ReturningNodes() const;

  // The current epoch: changes every time the cluster (re-)forms; 0 while
  // it is not formed. Node operations carry it, so a node fenced out of an
  // earlier epoch (stopped, then resumed) cannot apply stale ones.
  uint64_t epoch() const;
  // Leader: time since each follower's last heartbeat (for metrics).
  std::map<int, absl::Duration> HeartbeatAges() const;

  // A node as this node sees it (cluster status). Up: heard from within
  // failure_timeout (this node: always); down: silent past it or never
  // joined; unknown: a follower cannot tell of another follower while the
  // cluster is not READY (it hears only from the leader).
  enum class NodeHealth { kUp, kDown, kUnknown };
  struct NodeView {
    int node = 0;
    std::string address;
    NodeHealth health = NodeHealth::kUnknown;
  };
  std::vector<NodeView> Nodes() const;
  int local_ranks() const { return spec_.local_ranks; }

  // Leader side of the Peer RPCs.
  absl::StatusOr<v1::JoinResponse> HandleJoin(const v1::JoinRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> HandleHeartbeat(
      const v1::HeartbeatRequest& request);

 private:
  // Forms the cluster, watches it, and re-forms it after a failure once
  // every node is alive again, until stopped.
  void Run(std::function<absl::Status()> on_ready);
  // Who leads and under which epoch: static, node 0 under a fresh random
  // epoch once every node joined; on a coordinator, as it records it.
  // Nullopt when stopping.
  std::optional<Coordinator::Leadership> AwaitLeader();
  // Followers: Join `leadership`'s node until it hands out an epoch other
  // than `previous_epoch` (on a coordinator: exactly the recorded epoch).
  // Nullopt when stopping, or when the coordinator names another leader
  // meanwhile (the caller looks again).
  std::optional<uint64_t> JoinLeader(const Coordinator::Leadership& leadership,
                                     uint64_t previous_epoch);
  // Leader: the members of the next epoch, once they joined and heartbeat:
  // static, every node; on a coordinator, every node alive (joined and
  // heartbeating), once each node the coordinator lists as a member is among
  // them. Nullopt when stopping or, on a coordinator, when the leadership
  // lapsed.
  std::optional<std::vector<int>> WaitForMembers();
  // Whether `node` is a member of the current epoch (mu_ held).
  bool MemberLocked(int node) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // This node leads now (mu_ held).
  bool LeadingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leadership still holds: always static; on a coordinator, valid.
  bool LeadershipValid() const;
  // The leadership cannot be renewed because the coordinator lost its
  // quorum, and nobody else can lead meanwhile (see CheckServingReads).
  bool HeldWithoutQuorum() const;
  // This epoch's communicators: Gloo's, and the device one when a factory is
  // given.
  struct Communicators {
    std::unique_ptr<Communicator> host;
    std::unique_ptr<Communicator> device;
  };
  absl::StatusOr<Communicators> Connect(uint64_t epoch,
                                        const std::vector<int>& members);
  // Aborts this epoch's communicators (mu_ held).
  void AbortCommunicators() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JoinResponse Roster() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HeartbeatLoop(uint64_t epoch);
  // The leader's watch over its followers' heartbeats.
  void MonitorLoop();
  void Fail(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mu_);

  // Between attempts to join, or to form the cluster.
  static constexpr absl::Duration kJoinRetry = absl::Milliseconds(100);
  // After a leader refused this node's protocol: no quick fix (a node must
  // run another release), so retry (and report) slowly.
  static constexpr absl::Duration kProtocolRetry = absl::Seconds(5);
  // A random 64-bit number: incarnations, and the static mode's epochs.
  static uint64_t NewIncarnation();

  const Spec spec_;
  LocalKvStore* const store_;
  const uint64_t incarnation_;

  mutable absl::Mutex mu_;
  std::map<int, v1::NodeInfo> joined_ ABSL_GUARDED_BY(mu_);
  std::map<int, absl::Time> last_heartbeat_ ABSL_GUARDED_BY(mu_);
  // Follower: when the leader last answered a join or heartbeat.
  std::optional<absl::Time> leader_answer_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The members of epoch_ (ascending), and of the last epoch that was READY.
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);
  std::vector<int> settled_members_ ABSL_GUARDED_BY(mu_);
  int leader_ ABSL_GUARDED_BY(mu_) = 0;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> failure_ ABSL_GUARDED_BY(mu_);
  // Leader: the nodes behind the last failure (told to followers).
  std::vector<int> failed_nodes_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> on_failure_;
  std::unique_ptr<Communicator> communicator_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Communicator> device_communicator_ ABSL_GUARDED_BY(mu_);
  // Communicators of earlier epochs: a runtime may still be returning from
  // an aborted collective on one, so they live as long as the membership.
  std::vector<std::unique_ptr<Communicator>> retired_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace summon::server

#endif  // SUMMON_SERVER_CLUSTER_MEMBERSHIP_H_
