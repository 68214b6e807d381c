#include "server/cluster/membership.h"

#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/cluster/coordinator_kv_store.h"
#include "server/cluster/rendezvous_store.h"
#include "server/comm/gloo_communicator.h"
#include "server/rpc/status_conversion.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

constexpr absl::Duration kJoinRetry = absl::Milliseconds(100);

uint64_t NewIncarnation() {
  std::random_device random;
  return (static_cast<uint64_t>(random()) << 32) ^ random();
}

std::string HostOf(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}

std::string RendezvousPrefix(uint64_t epoch) {
  return absl::StrCat("summon/", epoch, "/gloo/");
}

}  // namespace

Membership::Membership(Spec spec, LocalKvStore* store)
    : spec_(std::move(spec)), store_(store), incarnation_(NewIncarnation()) {}

Membership::~Membership() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    AbortCommunicators();
  }
  if (thread_.joinable()) thread_.join();
}

void Membership::Start(std::function<absl::Status()> on_ready,
                       std::function<void(const absl::Status&)> on_failure) {
  on_failure_ = std::move(on_failure);
  thread_ = std::thread([this, on_ready] { Run(on_ready); });
}

bool Membership::LeadershipValid() const {
  return spec_.coordinator == nullptr || spec_.coordinator->IsLeader();
}

bool Membership::LeadingLocked() const {
  return leader_ == spec_.node_rank && LeadershipValid();
}

bool Membership::is_leader() const {
  absl::MutexLock lock(&mu_);
  return LeadingLocked();
}

int Membership::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

absl::Status Membership::CheckLeading() const {
  if (LeadershipValid()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "electing a leader: node ", spec_.node_rank,
      "'s leadership lapsed (its coordinator lease could have expired)"));
}

bool Membership::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

absl::Status Membership::CheckReady() const {
  absl::MutexLock lock(&mu_);
  if (ready_ && leader_ == spec_.node_rank) {
    // A leader stops acting before its lease could have expired, even
    // before its membership noticed.
    if (absl::Status leading = CheckLeading(); !leading.ok()) return leading;
  }
  if (ready_) return absl::OkStatus();
  if (failure_.has_value()) return *failure_;
  std::vector<int> missing;
  for (int node = 0; node < size(); ++node) {
    if (joined_.count(node) == 0) missing.push_back(node);
  }
  return absl::UnavailableError(absl::StrCat(
      "the cluster is not ready: ",
      missing.empty() || !LeadingLocked()
          ? std::string("nodes are still connecting")
          : absl::StrCat("waiting for node(s) ", absl::StrJoin(missing, ", "),
                         " to join")));
}

Communicator* Membership::communicator() const {
  absl::MutexLock lock(&mu_);
  return communicator_.get();
}

Communicator* Membership::device_communicator() const {
  absl::MutexLock lock(&mu_);
  return device_communicator_.get();
}

void Membership::AbortCommunicators() {
  if (communicator_) communicator_->Abort();
  if (device_communicator_) device_communicator_->Abort();
}

std::shared_ptr<grpc::Channel> Membership::ChannelTo(int node) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[node];
  if (!channel) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(64 << 20);
    arguments.SetMaxSendMessageSize(64 << 20);
    // A restarted peer is back within a second or two: reconnect quickly
    // instead of gRPC's default backoff of up to two minutes.
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    channel = grpc::CreateCustomChannel(
        spec_.nodes[node],
        spec_.credentials ? spec_.credentials
                          : grpc::InsecureChannelCredentials(),
        arguments);
  }
  return channel;
}

v1::JoinResponse Membership::Roster() const {
  v1::JoinResponse response;
  for (const auto& [node, info] : joined_) *response.add_nodes() = info;
  response.set_membership_epoch(epoch_);
  response.set_heartbeat_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(spec_.heartbeat_interval)));
  response.set_collective_timeout_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(spec_.collective_timeout)));
  return response;
}

absl::StatusOr<v1::JoinResponse> Membership::HandleJoin(
    const v1::JoinRequest& request) {
  if (!is_leader()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", spec_.node_rank, " is not the leader"));
  }
  const int node = request.node().node_rank();
  if (node < 0 || node >= size() || node == spec_.node_rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("node rank ", node, " is not a follower of this ", size(),
                     "-node cluster"));
  }
  if (request.local_ranks() != spec_.local_ranks) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node, " hosts ", request.local_ranks(),
                     " local ranks but the cluster has ", spec_.local_ranks));
  }
  bool restarted_while_ready = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = joined_.find(node);
    const bool known = it != joined_.end() &&
                       it->second.incarnation() == request.node().incarnation();
    if (!known) {
      restarted_while_ready = ready_;
      v1::NodeInfo info = request.node();
      info.set_alive(true);
      joined_[node] = info;
      // A channel made while the node was down may still be backing off
      // from refused connections (up to the maximum backoff) and would fail
      // the first call after the re-form fast; the node now listens, so a
      // fresh channel connects at once.
      channels_.erase(node);
      spdlog::info("cluster: node {} joined (incarnation {:x})", node,
                   info.incarnation());
    }
    last_heartbeat_[node] = absl::Now();
  }
  if (restarted_while_ready) {
    {
      absl::MutexLock lock(&mu_);
      failed_nodes_ = {node};
    }
    // Its previous life's copies and staged data are gone from the
    // cluster's view: treat it as a failure and re-form.
    Fail(absl::UnavailableError(
        absl::StrCat("node ", node,
                     " restarted; sessions were aborted and the cluster "
                     "re-forms")));
  }
  absl::MutexLock lock(&mu_);
  return Roster();
}

absl::StatusOr<v1::HeartbeatResponse> Membership::HandleHeartbeat(
    const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = joined_.find(request.node_rank());
  if (it == joined_.end() ||
      it->second.incarnation() != request.incarnation()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", request.node_rank(), " is not a member of this cluster"));
  }
  last_heartbeat_[request.node_rank()] = absl::Now();
  v1::HeartbeatResponse response;
  response.set_membership_epoch(epoch_);
  for (int node : failed_nodes_) response.add_failed_nodes(node);
  return response;
}

std::map<int, absl::Duration> Membership::HeartbeatAges() const {
  absl::MutexLock lock(&mu_);
  std::map<int, absl::Duration> ages;
  const absl::Time now = absl::Now();
  for (const auto& [node, last] : last_heartbeat_) ages[node] = now - last;
  return ages;
}

std::vector<Membership::NodeView> Membership::Nodes() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  const auto recent = [&](std::optional<absl::Time> last) {
    return last.has_value() && now - *last <= spec_.failure_timeout
               ? NodeHealth::kUp
               : NodeHealth::kDown;
  };
  std::vector<NodeView> nodes;
  for (int node = 0; node < size(); ++node) {
    NodeView view{node, spec_.nodes[node], NodeHealth::kUnknown};
    if (node == spec_.node_rank) {
      view.health = NodeHealth::kUp;
    } else if (leader_ == spec_.node_rank) {
      auto it = last_heartbeat_.find(node);
      view.health = joined_.count(node) == 0 || it == last_heartbeat_.end()
                        ? NodeHealth::kDown
                        : recent(it->second);
    } else if (node == leader_) {
      view.health = recent(leader_answer_);
    } else if (ready_) {
      view.health = NodeHealth::kUp;
    }
    nodes.push_back(std::move(view));
  }
  return nodes;
}

uint64_t Membership::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

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
  for (int attempt = 1;; ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return std::nullopt;
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::JoinResponse response;
    const grpc::Status status = stub->Join(&context, request, &response);
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

void Membership::Fail(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (failure_.has_value() || stopping_) return;
    failure_ = reason;
    ready_ = false;
    if (leader_ == spec_.node_rank) epoch_ = 0;
    // Channels to a restarted peer would carry the dead peer's backoff.
    channels_.clear();
    // Nothing may wait for the lost node: blocked collectives fail now.
    AbortCommunicators();
  }
  spdlog::error("cluster: {}", reason.ToString());
  if (on_failure_) on_failure_(reason);
}

void Membership::MonitorLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_ && !failure_.has_value()) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), spec_.heartbeat_interval);
    if (stopping_ || failure_.has_value()) break;
    if (!LeadershipValid()) {
      // Lost to the coordinator (lease expired, cut off from etcd, paused
      // past it): another node may lead already, so this one stops and
      // rejoins as a follower.
      const absl::Status reason = absl::UnavailableError(absl::StrCat(
          "electing a leader: node ", spec_.node_rank,
          " lost its leadership; sessions were aborted and the cluster "
          "re-forms"));
      mu_.Unlock();
      Fail(reason);
      mu_.Lock();
      break;
    }
    const absl::Time now = absl::Now();
    for (int node = 0; node < size(); ++node) {
      if (node == spec_.node_rank) continue;
      auto it = last_heartbeat_.find(node);
      const absl::Time last = it == last_heartbeat_.end() ? now : it->second;
      if (now - last > spec_.failure_timeout) {
        failed_nodes_ = {node};
        const absl::Status reason = absl::UnavailableError(absl::StrCat(
            "node ", node, " failed: no heartbeat for ",
            absl::FormatDuration(now - last),
            "; sessions were aborted and the cluster re-forms when it is "
            "back"));
        mu_.Unlock();
        Fail(reason);
        mu_.Lock();
        break;
      }
    }
  }
}

void Membership::HeartbeatLoop(uint64_t epoch) {
  const int leader_node = leader();
  auto stub = v1::Peer::NewStub(ChannelTo(leader_node));
  absl::Time last_answer = absl::Now();
  absl::MutexLock lock(&mu_);
  while (!stopping_ && !failure_.has_value()) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), spec_.heartbeat_interval);
    if (stopping_) break;
    mu_.Unlock();
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + spec_.heartbeat_interval));
    v1::HeartbeatRequest request;
    request.set_node_rank(spec_.node_rank);
    request.set_incarnation(incarnation_);
    v1::HeartbeatResponse response;
    const grpc::Status status = stub->Heartbeat(&context, request, &response);
    if (status.ok() && response.membership_epoch() == epoch) {
      last_answer = absl::Now();
    } else if (status.ok()) {
      // The leader lost a node (or restarted): this node's view is stale,
      // so it is fenced until it rejoins the next epoch.
      std::vector<int> failed(response.failed_nodes().begin(),
                              response.failed_nodes().end());
      Fail(absl::UnavailableError(absl::StrCat(
          failed.empty()
              ? std::string("the cluster lost a node")
              : absl::StrCat("node ", absl::StrJoin(failed, ", "), " failed"),
          "; sessions were aborted and the cluster re-forms")));
    } else if (absl::Now() - last_answer > spec_.failure_timeout ||
               status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      Fail(absl::UnavailableError(
          absl::StrCat("node ", leader_node,
                       " (the leader) failed: ", status.error_message(),
                       spec_.coordinator == nullptr
                           ? "; the cluster re-forms when it is back"
                           : "; electing a leader")));
    } else {
      spdlog::warn("cluster: heartbeat to the leader failed: {}",
                   status.error_message());
    }
    mu_.Lock();
    if (status.ok()) leader_answer_ = absl::Now();
  }
}

}  // namespace summon::server
