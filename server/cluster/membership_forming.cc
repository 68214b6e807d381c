// How a cluster forms (Membership's second source file): who leads (node
// 0, or the coordinator's choice), the leader waiting for every node and
// beginning an epoch, followers joining it, the communicators of the epoch
// through the rendezvous, and the loop that forms the cluster again after
// each failure.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "server/cluster/coordinator_kv_store.h"
#include "server/cluster/membership.h"
#include "server/cluster/rendezvous_store.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/member_communicator.h"
#include "spdlog/spdlog.h"
#include "version.h"

namespace summon::server {
namespace {

std::string HostOf(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}

std::string RendezvousPrefix(uint64_t epoch) {
  return absl::StrCat("summon/", epoch, "/gloo/");
}

}  // namespace

std::optional<Coordinator::Leadership> Membership::AwaitLeader() {
  if (spec_.coordinator == nullptr) return Coordinator::Leadership{0, 0};
  absl::Time logged = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return std::nullopt;
    }
    absl::StatusOr<Coordinator::Leadership> leadership =
        spec_.coordinator->CurrentLeader();
    if (leadership.ok()) return *leadership;
    if (absl::Now() - logged > absl::Seconds(5)) {
      spdlog::info("cluster: node {} waits for a leader: {}", spec_.node_rank,
                   leadership.status().ToString());
      logged = absl::Now();
    }
    absl::SleepFor(kJoinRetry);
  }
}

std::optional<uint64_t> Membership::JoinLeader(
    const Coordinator::Leadership& leadership, uint64_t previous_epoch) {
  auto stub = v1::Peer::NewStub(ChannelTo(leadership.node));
  v1::JoinRequest request;
  request.mutable_node()->set_node_rank(spec_.node_rank);
  request.mutable_node()->set_address(spec_.nodes[spec_.node_rank]);
  request.mutable_node()->set_incarnation(incarnation_);
  request.set_local_ranks(spec_.local_ranks);
  SetProtocol(spec_.protocol, &request);
  request.set_release(kVersion);
  for (int attempt = 1;; ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return std::nullopt;
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::JoinResponse response;
    const grpc::Status status = stub->Join(&context, request, &response);
    // A leader of another release: both sides check the protocol (a leader
    // older than the check admits anyone), and neither mismatch mends
    // itself, so it is reported as an error and retried slowly.
    absl::Status common = absl::OkStatus();
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      common = absl::UnimplementedError(status.error_message());
    } else if (status.ok()) {
      common = CheckPeerProtocol(ProtocolOf(response), leadership.node,
                                 response.release(), spec_.protocol,
                                 spec_.node_rank, kVersion);
    }
    if (!common.ok()) {
      spdlog::error("cluster: node {} cannot join the leader: {}",
                    spec_.node_rank, std::string(common.message()));
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kProtocolRetry);
      if (stopping_) return std::nullopt;
      continue;
    }
    // Epoch 0: the leader still waits for every node to be alive. An epoch
    // whose members leave this node out formed while it was away: the
    // leader re-forms with it (HandleJoin), so it asks again.
    bool in_roster = false;
    for (const v1::NodeInfo& info : response.nodes()) {
      in_roster = in_roster || info.node_rank() == spec_.node_rank;
    }
    if (status.ok() && in_roster && response.membership_epoch() != 0 &&
        response.membership_epoch() != previous_epoch) {
      // On a coordinator a follower joins only the epoch the coordinator
      // records now: a deposed leader that still answers cannot enlist it.
      if (spec_.coordinator != nullptr) {
        absl::StatusOr<Coordinator::Leadership> now =
            spec_.coordinator->CurrentLeader();
        if (!now.ok() || now->node != leadership.node ||
            now->epoch != response.membership_epoch()) {
          return std::nullopt;
        }
      }
      absl::MutexLock lock(&mu_);
      joined_.clear();
      members_.clear();
      for (const v1::NodeInfo& info : response.nodes()) {
        joined_[info.node_rank()] = info;
        members_.push_back(info.node_rank());
      }
      std::sort(members_.begin(), members_.end());
      leader_answer_ = absl::Now();
      leader_ = leadership.node;
      epoch_ = response.membership_epoch();
      return epoch_;
    }
    // The leader this node tries may have been deposed meanwhile (killed,
    // its lease expired): look at the coordinator again now and then.
    if (spec_.coordinator != nullptr && attempt % 10 == 0) {
      absl::StatusOr<Coordinator::Leadership> now =
          spec_.coordinator->CurrentLeader();
      if (!now.ok() || now->node != leadership.node) return std::nullopt;
    }
    if (!status.ok() &&
        status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // On a coordinator the node asked may not have begun leading yet (or
      // just lost it): expected while a leader is elected.
      spdlog::log(
          spec_.coordinator == nullptr ? spdlog::level::err
                                       : spdlog::level::debug,
          "cluster: the leader refused node {}: {}", spec_.node_rank,
          status.error_message());
    }
    absl::SleepFor(kJoinRetry);
  }
}

std::optional<std::vector<int>> Membership::WaitForMembers() {
  absl::Time logged = absl::Now();
  while (true) {
    std::vector<int> alive = {spec_.node_rank};
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !LeadershipValid()) return std::nullopt;
      const absl::Time now = absl::Now();
      for (int node = 0; node < size(); ++node) {
        if (node == spec_.node_rank) continue;
        auto it = last_heartbeat_.find(node);
        if (joined_.count(node) > 0 && it != last_heartbeat_.end() &&
            now - it->second <= spec_.failure_timeout) {
          alive.push_back(node);
        }
      }
    }
    std::sort(alive.begin(), alive.end());
    if (static_cast<int>(alive.size()) == size()) return alive;
    // On a coordinator the cluster forms on the survivors: every node whose
    // member key is alive in etcd (its lease renewed) must have joined,
    // the others are left out. A node killed keeps its key until its lease
    // expires, so a follower lost forms the survivors within about the TTL.
    if (spec_.coordinator != nullptr) {
      absl::StatusOr<std::vector<Coordinator::Member>> listed =
          spec_.coordinator->Members();
      if (listed.ok()) {
        std::vector<int> waiting;
        for (const Coordinator::Member& member : *listed) {
          if (!std::binary_search(alive.begin(), alive.end(), member.node)) {
            waiting.push_back(member.node);
          }
        }
        if (waiting.empty()) return alive;
        if (absl::Now() - logged > absl::Seconds(5)) {
          spdlog::info("cluster: node {} waits for node(s) {} to join",
                       spec_.node_rank, absl::StrJoin(waiting, ", "));
          logged = absl::Now();
        }
      }
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), kJoinRetry);
  }
}

absl::StatusOr<Membership::Communicators> Membership::Connect(
    uint64_t epoch, const std::vector<int>& members) {
  // The rendezvous: the coordinator's records of this epoch (any node may
  // be gone), or the static leader's in-memory store.
  std::unique_ptr<KvStore> remote;
  KvStore* store = store_;
  if (spec_.coordinator != nullptr) {
    remote = std::make_unique<CoordinatorKvStore>(*spec_.coordinator, epoch);
    store = remote.get();
  } else if (spec_.node_rank != 0) {
    remote = std::make_unique<RemoteKvStore>(ChannelTo(0));
    store = remote.get();
  }
  RendezvousStore rendezvous(*store, RendezvousPrefix(epoch),
                             spec_.collective_timeout);
  // The communicators connect the members only (rank i: the i-th member);
  // with a node absent, MemberCommunicator keeps addressing by node rank.
  const int member_rank = static_cast<int>(
      std::lower_bound(members.begin(), members.end(), spec_.node_rank) -
      members.begin());
  const int member_count = static_cast<int>(members.size());
  const auto by_node = [&](std::unique_ptr<Communicator> inner) {
    if (member_count == size()) return inner;
    return std::unique_ptr<Communicator>(std::make_unique<MemberCommunicator>(
        std::move(inner), spec_.node_rank, size(), members));
  };
  GlooCommunicator::Spec gloo;
  gloo.rank = member_rank;
  gloo.size = member_count;
  gloo.hostname = HostOf(spec_.nodes[spec_.node_rank]);
  gloo.connect_timeout = spec_.collective_timeout;
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> communicator =
      GlooCommunicator::Create(gloo, rendezvous);
  if (!communicator.ok()) return communicator.status();
  Communicators connected;
  connected.host = by_node(*std::move(communicator));
  if (spec_.device_communicator == nullptr) return connected;
  RendezvousStore device_rendezvous(*store,
                                    absl::StrCat("summon/", epoch, "/device/"),
                                    spec_.collective_timeout);
  absl::StatusOr<std::unique_ptr<Communicator>> device =
      spec_.device_communicator(member_rank, member_count,
                                spec_.collective_timeout, device_rendezvous);
  if (!device.ok()) {
    return absl::Status(
        device.status().code(),
        absl::StrCat("the device communicator: ", device.status().message()));
  }
  connected.device = by_node(*std::move(device));
  return connected;
}

void Membership::Run(std::function<absl::Status()> on_ready) {
  uint64_t previous_epoch = 0;
  while (true) {
    std::optional<Coordinator::Leadership> leadership = AwaitLeader();
    if (!leadership.has_value()) return;
    uint64_t epoch = 0;
    bool leads = false;
    if (leadership->node == spec_.node_rank &&
        (spec_.coordinator == nullptr || spec_.coordinator->IsLeader())) {
      {
        absl::MutexLock lock(&mu_);
        if (leader_ != spec_.node_rank) {
          // Newly elected: only joins to this node count, not the roster
          // copied from the previous leader.
          leader_ = spec_.node_rank;
          joined_.clear();
          last_heartbeat_.clear();
          channels_.clear();
        }
        v1::NodeInfo self;
        self.set_node_rank(spec_.node_rank);
        self.set_address(spec_.nodes[spec_.node_rank]);
        self.set_incarnation(incarnation_);
        self.set_alive(true);
        joined_[spec_.node_rank] = self;
      }
      // Every follower joined and is alive (on a coordinator: the
      // survivors); then the members meet in the rendezvous store under a
      // fresh epoch.
      std::optional<std::vector<int>> members = WaitForMembers();
      if (!members.has_value()) {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        continue;  // The leadership lapsed: look again.
      }
      absl::StatusOr<uint64_t> next =
          spec_.coordinator == nullptr
              ? absl::StatusOr<uint64_t>(NewIncarnation() | 1)
              : spec_.coordinator->NextEpoch();
      if (!next.ok()) {
        spdlog::warn("cluster: node {} cannot begin an epoch: {}",
                     spec_.node_rank, next.status().ToString());
        absl::SleepFor(kJoinRetry);
        continue;
      }
      absl::MutexLock lock(&mu_);
      members_ = *members;
      epoch_ = *next;
      epoch = epoch_;
      leads = true;
    } else if (leadership->node == spec_.node_rank) {
      // The coordinator still names this node's previous life (or a lapsed
      // leadership of its own): wait until it elects.
      absl::SleepFor(kJoinRetry);
      continue;
    } else {
      {
        absl::MutexLock lock(&mu_);
        if (leader_ == spec_.node_rank) {
          // Deposed: nothing of this node's leadership may stay.
          leader_ = leadership->node;
          epoch_ = 0;
        }
      }
      std::optional<uint64_t> joined = JoinLeader(*leadership, previous_epoch);
      if (!joined.has_value()) {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        continue;
      }
      epoch = *joined;
    }
    std::vector<int> members;
    {
      absl::MutexLock lock(&mu_);
      members = members_;
    }
    absl::StatusOr<Communicators> communicator = Connect(epoch, members);
    if (!communicator.ok()) {
      spdlog::error("cluster: node {} could not connect to its peers: {}",
                    spec_.node_rank, communicator.status().ToString());
      absl::MutexLock lock(&mu_);
      if (leader_ == spec_.node_rank) epoch_ = 0;
      previous_epoch = epoch;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (communicator_) retired_.push_back(std::move(communicator_));
      if (device_communicator_) {
        retired_.push_back(std::move(device_communicator_));
      }
      communicator_ = std::move(communicator->host);
      device_communicator_ = std::move(communicator->device);
      failure_.reset();
      // Heartbeats start now; joins may be long past.
      for (int node : members_) last_heartbeat_[node] = absl::Now();
    }
    // Runtimes reset and pending commits resolve before any client call is
    // let through; a commit that still cannot finish keeps the cluster out
    // of READY (it re-forms and tries again).
    if (absl::Status formed = on_ready(); !formed.ok()) {
      Fail(formed);
      previous_epoch = epoch;
      absl::SleepFor(kJoinRetry);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      // A failure while the cluster formed (a node lost or back) keeps it
      // out of READY: the loop below re-forms at once.
      ready_ = !failure_.has_value();
      if (ready_) settled_members_ = members_;
      failed_nodes_.clear();
    }
    spdlog::info(
        "cluster: node {} READY ({} of {} nodes ({}) x {} local ranks, epoch "
        "{:x})",
        spec_.node_rank, members.size(), size(), absl::StrJoin(members, ","),
        spec_.local_ranks, epoch);
    if (leads) {
      MonitorLoop();
    } else {
      HeartbeatLoop(epoch);
    }
    previous_epoch = epoch;
  }
}

}  // namespace summon::server
