#include "server/cluster/membership.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/rpc/status_conversion.h"
#include "spdlog/spdlog.h"
#include "version.h"

namespace summon::server {

uint64_t Membership::NewIncarnation() {
  std::random_device random;
  return (static_cast<uint64_t>(random()) << 32) ^ random();
}

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

bool Membership::HeldWithoutQuorum() const {
  return spec_.coordinator != nullptr && spec_.coordinator->HeldWithoutQuorum();
}

absl::Status Membership::CheckLeading() const {
  if (LeadershipValid()) return absl::OkStatus();
  if (HeldWithoutQuorum()) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator has no quorum: node ", spec_.node_rank,
        " (the leader) cannot renew its lease; new sessions, writebacks and "
        "model operations wait until etcd has a quorum again (reads of open "
        "sessions are served)"));
  }
  return absl::UnavailableError(absl::StrCat(
      "electing a leader: node ", spec_.node_rank,
      "'s leadership lapsed (its coordinator lease could have expired)"));
}

absl::Status Membership::CheckServingReads() const {
  {
    absl::MutexLock lock(&mu_);
    if (ready_ && leader_ == spec_.node_rank && HeldWithoutQuorum()) {
      return absl::OkStatus();
    }
  }
  return CheckReady();
}

bool Membership::formed_as_leader() const {
  absl::MutexLock lock(&mu_);
  return leader_ == spec_.node_rank;
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
  // On a coordinator a cluster forms after each election, so a call that
  // meets the formation is told so in the words clients retry on.
  return absl::UnavailableError(
      absl::StrCat("the cluster is not ready: ",
                   missing.empty() || !LeadingLocked()
                       ? std::string("nodes are still connecting")
                       : absl::StrCat("waiting for node(s) ",
                                      absl::StrJoin(missing, ", "), " to join"),
                   spec_.coordinator == nullptr ? "" : "; electing a leader"));
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

bool Membership::MemberLocked(int node) const {
  return members_.empty() ||
         std::find(members_.begin(), members_.end(), node) != members_.end();
}

std::vector<int> Membership::Members() const {
  absl::MutexLock lock(&mu_);
  if (!members_.empty()) return members_;
  std::vector<int> every(size());
  for (int node = 0; node < size(); ++node) every[node] = node;
  return every;
}

std::set<int> Membership::AbsentNodes() const {
  absl::MutexLock lock(&mu_);
  std::set<int> absent;
  for (int node = 0; node < size(); ++node) {
    if (!MemberLocked(node)) absent.insert(node);
  }
  return absent;
}

std::set<int> Membership::ReturningNodes() const {
  absl::MutexLock lock(&mu_);
  std::set<int> returning;
  if (settled_members_.empty()) return returning;
  for (int node : members_) {
    if (std::find(settled_members_.begin(), settled_members_.end(), node) ==
        settled_members_.end()) {
      returning.insert(node);
    }
  }
  return returning;
}

v1::JoinResponse Membership::Roster() const {
  v1::JoinResponse response;
  // Once an epoch began, its members only: a follower outside them knows
  // it is not in this formation (and waits for the next).
  for (const auto& [node, info] : joined_) {
    if (epoch_ == 0 || MemberLocked(node)) *response.add_nodes() = info;
  }
  response.set_membership_epoch(epoch_);
  response.set_heartbeat_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(spec_.heartbeat_interval)));
  response.set_collective_timeout_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(spec_.collective_timeout)));
  SetProtocol(spec_.protocol, &response);
  response.set_release(kVersion);
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
  // A rolling update across releases: admitted only with a version in
  // common (the joining node reports the refusal and retries slowly).
  if (absl::Status common =
          CheckPeerProtocol(spec_.protocol, spec_.node_rank, kVersion,
                            ProtocolOf(request), node, request.release());
      !common.ok()) {
    spdlog::error("cluster: refused node {}: {}", node,
                  std::string(common.message()));
    return common;
  }
  bool restarted_while_ready = false;
  bool back_while_ready = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = joined_.find(node);
    const bool known = it != joined_.end() &&
                       it->second.incarnation() == request.node().incarnation();
    // A node outside the formed epoch (the cluster formed on the survivors
    // while it was away) is taken in by re-forming with it.
    back_while_ready = ready_ && known && !MemberLocked(node);
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
  if (back_while_ready) {
    Fail(absl::UnavailableError(absl::StrCat(
        "node ", node,
        " is back; sessions were aborted and the cluster re-forms with it")));
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
      view.health = MemberLocked(node) ? NodeHealth::kUp : NodeHealth::kDown;
    }
    nodes.push_back(std::move(view));
  }
  return nodes;
}

uint64_t Membership::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void Membership::Reform(uint64_t epoch, const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch == 0 || epoch_ != epoch || !ready_ || !LeadingLocked()) return;
  }
  // No node is lost: failed_nodes_ stays empty and every node rejoins.
  Fail(absl::UnavailableError(absl::StrCat(
      "epoch ", epoch, ": a collective failed while every node is up (",
      reason.message(), "); sessions were aborted and the cluster re-forms")));
}

void Membership::Fail(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (failure_.has_value() || stopping_) return;
    failure_ = reason;
    ready_ = false;
    // This node has left the epoch, follower or leader: its runtime's order
    // starts again (on_failure_), so an operation of the epoch still on its
    // way (sent before the failure, or by a leader paused and resumed) is
    // fenced here instead of taking a number of the next epoch's order, or
    // running there (a stale collective breaks the new communicator).
    epoch_ = 0;
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
    // A lapsed leader stops acting at once (CheckLeading) but keeps its
    // formation until its coordinator finds the lease lost: without a
    // quorum nobody else can lead, and the lease is either renewed (it
    // serves again) or found expired once etcd answers (it steps down
    // here); cut off from etcd, that is TTL + margin after its last renewal.
    if (!LeadershipValid() && !spec_.coordinator->HoldsLease()) {
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
    for (int node : members_) {
      if (node == spec_.node_rank) continue;
      auto it = last_heartbeat_.find(node);
      const absl::Time last = it == last_heartbeat_.end() ? now : it->second;
      if (now - last > spec_.failure_timeout) {
        failed_nodes_ = {node};
        const absl::Status reason = absl::UnavailableError(absl::StrCat(
            "node ", node, " failed: no heartbeat for ",
            absl::FormatDuration(now - last),
            spec_.coordinator == nullptr
                ? "; sessions were aborted and the cluster re-forms when it "
                  "is back"
                : "; sessions were aborted and the cluster re-forms on the "
                  "survivors"));
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
    } else if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // The leader answers but no longer counts this node a member: it
      // re-formed (a node came back, or was lost), not failed.
      Fail(absl::UnavailableError(absl::StrCat(
          "node ", leader_node, " (the leader) re-forms the cluster (",
          status.error_message(),
          "); sessions were aborted and this node joins again")));
    } else if (absl::Now() - last_answer > spec_.failure_timeout) {
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
