// How a cluster forms (Membership's second source file): who leads (node
// 0, or the coordinator's choice), the leader waiting for every node and
// beginning an epoch, followers joining it, the communicators of the epoch
// through the rendezvous, and the loop that forms the cluster again after
// each failure.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "server/cluster/coordinator_kv_store.h"
#include "server/cluster/membership.h"
#include "server/cluster/rendezvous_store.h"
#include "server/comm/gloo_communicator.h"
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
    // Epoch 0: the leader still waits for every node to be alive.
    if (status.ok() && response.membership_epoch() != 0 &&
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
      for (const v1::NodeInfo& info : response.nodes()) {
        joined_[info.node_rank()] = info;
      }
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

bool Membership::WaitForEveryNode() {
  absl::MutexLock lock(&mu_);
  while (!stopping_ && LeadershipValid()) {
    const absl::Time now = absl::Now();
    int alive = 1;
    for (int node = 0; node < size(); ++node) {
      if (node == spec_.node_rank) continue;
      auto it = last_heartbeat_.find(node);
      if (joined_.count(node) > 0 && it != last_heartbeat_.end() &&
          now - it->second <= spec_.failure_timeout) {
        ++alive;
      }
    }
    if (alive == size()) return true;
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), kJoinRetry);
  }
  return false;
}

absl::StatusOr<Membership::Communicators> Membership::Connect(uint64_t epoch) {
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
  GlooCommunicator::Spec gloo;
  gloo.rank = spec_.node_rank;
  gloo.size = size();
  gloo.hostname = HostOf(spec_.nodes[spec_.node_rank]);
  gloo.connect_timeout = spec_.collective_timeout;
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> communicator =
      GlooCommunicator::Create(gloo, rendezvous);
  if (!communicator.ok()) return communicator.status();
  Communicators connected;
  connected.host = *std::move(communicator);
  if (spec_.device_communicator == nullptr) return connected;
  RendezvousStore device_rendezvous(*store,
                                    absl::StrCat("summon/", epoch, "/device/"),
                                    spec_.collective_timeout);
  absl::StatusOr<std::unique_ptr<Communicator>> device =
      spec_.device_communicator(spec_.node_rank, size(),
                                spec_.collective_timeout, device_rendezvous);
  if (!device.ok()) {
    return absl::Status(
        device.status().code(),
        absl::StrCat("the device communicator: ", device.status().message()));
  }
  connected.device = *std::move(device);
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
      // Every follower joined and is alive; then everyone meets in the
      // rendezvous store under a fresh epoch.
      if (!WaitForEveryNode()) {
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
    absl::StatusOr<Communicators> communicator = Connect(epoch);
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
      for (int node = 0; node < size(); ++node) {
        last_heartbeat_[node] = absl::Now();
      }
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
      ready_ = true;
      failed_nodes_.clear();
    }
    spdlog::info(
        "cluster: node {} READY ({} nodes x {} local ranks, epoch "
        "{:x})",
        spec_.node_rank, size(), spec_.local_ranks, epoch);
    if (leads) {
      MonitorLoop();
    } else {
      HeartbeatLoop(epoch);
    }
    previous_epoch = epoch;
  }
}

}  // namespace summon::server
