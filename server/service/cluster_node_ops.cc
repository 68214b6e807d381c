#include "server/service/cluster_node_ops.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/session_rules.h"
#include "server/rpc/status_conversion.h"
#include "server/service/proto_conversion.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// Below gRPC's default 4 MiB message limit, in whole elements of any dtype.
constexpr size_t kWritePieceBytes = 1 << 20;

// Rewrites a node's failure so the caller sees which node it was.
absl::Status OnNode(int node, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("node ", node, ": ", status.message()));
}

}  // namespace

ClusterNodeOps::ClusterNodeOps(Membership* membership, NodeRuntime* local,
                               absl::Duration collective_timeout,
                               absl::Duration failure_wait)
    : membership_(membership),
      local_(local),
      // A node's part waits for its turn and then for the collective.
      rpc_timeout_(collective_timeout * 2 + absl::Seconds(5)),
      failure_wait_(failure_wait) {
  worker_ = std::thread([this] { Worker(); });
}

// What a background SetGenerations came to, and whether its caller stopped
// waiting for it (then the failure is logged here, nobody else hears it).
struct ClusterNodeOps::Outcome {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
};

ClusterNodeOps::~ClusterNodeOps() {
  shutting_down_ = true;
  CancelInFlight();
  std::vector<Background> background;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    background.swap(background_);
  }
  for (Background& task : background) task.thread.join();
  worker_.join();
}

std::unique_ptr<v1::Peer::Stub> ClusterNodeOps::Stub(int node) {
  return v1::Peer::NewStub(membership_->ChannelTo(node));
}

void ClusterNodeOps::Deadline(grpc::ClientContext& context) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
}

// A ClientContext registered for CancelInFlight while it lives.
class ClusterNodeOps::Call {
 public:
  explicit Call(const ClusterNodeOps& ops) : ops_(ops) {
    ops_.Deadline(context_);
    absl::MutexLock lock(&ops_.calls_mu_);
    ops_.calls_.insert(&context_);
    // Started after the destructor's CancelInFlight: nothing waits for it.
    if (ops_.shutting_down_) context_.TryCancel();
  }
  ~Call() {
    absl::MutexLock lock(&ops_.calls_mu_);
    ops_.calls_.erase(&context_);
  }
  grpc::ClientContext* get() { return &context_; }

 private:
  const ClusterNodeOps& ops_;
  grpc::ClientContext context_;
};

void ClusterNodeOps::CancelInFlight() {
  absl::MutexLock lock(&calls_mu_);
  for (grpc::ClientContext* context : calls_) context->TryCancel();
}

std::vector<absl::Status> ClusterNodeOps::OnEveryNode(
    uint64_t epoch, const std::function<absl::Status(int node)>& op,
    uint64_t sequence, bool decided) {
  // The members of the epoch only: on the survivors of a cluster the
  // absent nodes take no part (their entries stay OK).
  const int nodes = membership_->size();
  std::vector<absl::Status> results(nodes);
  const uint64_t current = membership_->epoch();
  if (epoch != current || epoch == 0 ||
      membership_->leader() != membership_->node_rank()) {
    // Numbered before the cluster re-formed, by a leader in no epoch (it
    // failed and has not re-formed: epoch 0), or by a node that no longer
    // leads (a call that reached it while it led, resumed after it joined
    // the next epoch as a follower): its sequence number is not the
    // current leader's, and run anywhere it would meet another operation
    // under the same number (two collectives on one Gloo tag).
    const absl::Status stale = absl::AbortedError(absl::StrCat(
        "an operation of cluster epoch ", absl::Hex(epoch),
        " was not sent: the cluster is in epoch ", absl::Hex(current),
        ", led by node ", membership_->leader()));
    for (int node : membership_->Members()) results[node] = stale;
    return results;
  }
  std::vector<std::thread> threads;
  for (int node : membership_->Members()) {
    if (node == membership_->node_rank()) continue;
    threads.emplace_back([&, node] { results[node] = OnNode(node, op(node)); });
  }
  const int self = membership_->node_rank();
  // The leader's own part is applied only while it may still act (its
  // coordinator lease provably alive); the other nodes fence by epoch.
  const absl::Status leading = membership_->CheckLeading();
  const bool same_epoch_leader =
      epoch != 0 && membership_->epoch() == epoch &&
      membership_->leader() == membership_->node_rank();
  // A decided COMMIT is applied here even while the leadership lapsed (etcd
  // slow to renew, one member lost): the decision is durable, the other
  // nodes of this epoch apply it, and every later leader completes it too;
  // refusing it here alone would leave this node's ranks without the
  // writeback the others hold (a half-applied writeback) for the rest of the
  // epoch. Never for an epoch this node has left.
  const bool own_part = leading.ok() || (decided && same_epoch_leader);
  if (!own_part && sequence != 0 && same_epoch_leader) {
    // The other nodes take this number: this node takes it too, unrun, or
    // every later operation would wait for it here until the epoch ends
    // (and a lapse the leader recovers from keeps the epoch). Only in the
    // epoch the operation was sent in, while this node still leads it: a
    // deposed leader's late operation must not take a number of the next
    // epoch's order.
    local_->SkipSequence(sequence).IgnoreError();
  }
  results[self] = OnNode(self, own_part ? op(self) : leading);
  for (std::thread& thread : threads) thread.join();
  return results;
}

absl::Status ClusterNodeOps::FirstFailure(
    const std::vector<absl::Status>& results) const {
  for (const absl::Status& status : results) {
    if (status.ok()) continue;
    // A lost peer shows up first as a broken collective on whichever node
    // noticed; the membership names the node that failed, once it has
    // declared it (within the failure timeout).
    if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
        absl::IsCancelled(status) || absl::IsAborted(status)) {
      const uint64_t epoch = membership_->epoch();
      const absl::Time give_up = absl::Now() + failure_wait_;
      while (membership_->ready() && absl::Now() < give_up && !shutting_down_) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      if (absl::Status cluster = membership_->CheckReady(); !cluster.ok()) {
        return cluster;
      }
      // Every node is up, yet a collective failed (a paused node came back,
      // a follower restarted quickly, a part timed out): the communicator of
      // whichever node saw it stays broken, and later collectives would fail
      // for the rest of the epoch. Only a new epoch rebuilds them; this
      // operation still fails (clients retry). Not for ABORTED/CANCELLED
      // (an epoch change or shutdown already under way) nor a lapsed leader.
      if ((absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) &&
          !shutting_down_ && membership_->CheckLeading().ok()) {
        membership_->Reform(epoch, status);
      }
    }
    return status;
  }
  return absl::OkStatus();
}

absl::Status ClusterNodeOps::Gather(const GatherOp& op) {
  v1::NodeGatherRequest request;
  request.set_sequence(op.sequence);
  request.set_gather_id(op.gather_id);
  request.set_model(op.model);
  SessionOptions scope_only;
  scope_only.scope = op.scope;
  // Each node places its copy by its own shards' placement and this flag.
  scope_only.offload_to_cpu = op.offload_to_cpu;
  SessionOptionsToProto(scope_only, request.mutable_scope());
  request.set_rank0_only(op.rank0_only);
  request.set_home_rank(op.home_rank);
  request.set_grads(op.grads);
  request.set_epoch(op.epoch);
  for (int node : op.stale_nodes) request.add_stale_nodes(node);
  return FirstFailure(OnEveryNode(
      op.epoch,
      [&](int node) -> absl::Status {
        if (node == membership_->node_rank()) return local_->Gather(op);
        Call call(*this);
        v1::NodeGatherResponse response;
        return FromGrpcStatus(
            Stub(node)->NodeGather(call.get(), request, &response));
      },
      op.sequence));
}

absl::Status ClusterNodeOps::Write(const WriteOp& op) {
  // Applied to every copy before the client hears back: read-your-writes
  // from any node. Large writes travel in pieces under gRPC's message limit.
  const uint64_t epoch = membership_->epoch();
  return FirstFailure(OnEveryNode(epoch, [&](int node) -> absl::Status {
    if (node == membership_->node_rank()) return local_->Write(op);
    auto stub = Stub(node);
    v1::NodeWriteRequest request;
    request.set_gather_id(op.gather_id);
    request.set_session_id(op.session_id);
    request.set_private_copy(op.private_copy);
    request.set_tensor(op.tensor);
    request.set_grad(op.grad);
    request.set_epoch(epoch);
    size_t at = 0;
    do {
      const size_t piece = std::min(kWritePieceBytes, op.bytes.size() - at);
      request.set_element_offset(op.element_offset +
                                 static_cast<int64_t>(at) / op.element_size);
      request.set_data(op.bytes.substr(at, piece));
      grpc::ClientContext context;
      Deadline(context);
      v1::NodeWriteResponse response;
      if (absl::Status status =
              FromGrpcStatus(stub->NodeWrite(&context, request, &response));
          !status.ok()) {
        return status;
      }
      at += piece;
    } while (at < op.bytes.size());
    return absl::OkStatus();
  }));
}

absl::Status ClusterNodeOps::Read(const std::string& gather_id,
                                  const std::string& session_id, int tensor,
                                  bool grad, core::DType dtype, int64_t offset,
                                  int64_t count, int64_t chunk_bytes,
                                  const ChunkSink& sink) {
  if (local_->HasCopy(gather_id)) {
    return local_->Read(gather_id, session_id, tensor, grad, dtype, offset,
                        count, chunk_bytes, sink);
  }
  // No copy here (rank0_only elsewhere): proxy from the node holding it.
  v1::NodeReadRequest request;
  request.set_gather_id(gather_id);
  request.set_session_id(session_id);
  request.set_tensor(tensor);
  request.set_grad(grad);
  request.set_dtype(DTypeToProto(dtype));
  request.set_element_offset(offset);
  request.set_element_count(count);
  request.set_chunk_bytes(chunk_bytes);
  request.set_epoch(membership_->epoch());
  absl::Status last = absl::NotFoundError(
      absl::StrCat("no node holds a copy of gather ", gather_id));
  for (int node : membership_->Members()) {
    if (node == membership_->node_rank()) continue;
    grpc::ClientContext context;
    Deadline(context);
    auto reader = Stub(node)->NodeRead(&context, request);
    v1::NodeReadResponse chunk;
    bool stopped = false;
    while (reader->Read(&chunk)) {
      if (!sink(chunk.element_offset(), chunk.data(), nullptr)) {
        context.TryCancel();
        stopped = true;
        break;
      }
    }
    const absl::Status status = FromGrpcStatus(reader->Finish());
    if (stopped) return absl::CancelledError("reader went away");
    if (status.code() == absl::StatusCode::kFailedPrecondition) continue;
    return OnNode(node, status);
  }
  return last;
}

absl::StatusOr<std::vector<core::TensorStatistics>> ClusterNodeOps::Stats(
    const std::string& gather_id, const std::string& session_id,
    const std::vector<int>& tensors, bool grad, int bins) {
  if (local_->HasCopy(gather_id)) {
    return local_->Stats(gather_id, session_id, tensors, grad, bins);
  }
  v1::NodeStatsRequest request;
  request.set_gather_id(gather_id);
  request.set_session_id(session_id);
  for (int tensor : tensors) request.add_tensors(tensor);
  request.set_grad(grad);
  request.set_bins(bins);
  request.set_epoch(membership_->epoch());
  for (int node : membership_->Members()) {
    if (node == membership_->node_rank()) continue;
    grpc::ClientContext context;
    Deadline(context);
    v1::NodeStatsResponse response;
    const absl::Status status =
        FromGrpcStatus(Stub(node)->NodeStats(&context, request, &response));
    if (status.code() == absl::StatusCode::kFailedPrecondition) continue;
    if (!status.ok()) return OnNode(node, status);
    std::vector<core::TensorStatistics> result;
    for (const v1::TensorStats& stats : response.stats()) {
      core::TensorStatistics numbers;
      numbers.min = stats.min();
      numbers.max = stats.max();
      numbers.mean = stats.mean();
      numbers.l2_norm = stats.l2_norm();
      numbers.nan_count = stats.nan_count();
      numbers.inf_count = stats.inf_count();
      numbers.histogram_lower = stats.histogram().lower();
      numbers.histogram_upper = stats.histogram().upper();
      numbers.histogram.assign(stats.histogram().counts().begin(),
                               stats.histogram().counts().end());
      result.push_back(std::move(numbers));
    }
    return result;
  }
  return absl::NotFoundError(
      absl::StrCat("no node holds a copy of gather ", gather_id));
}

absl::StatusOr<int64_t> ClusterNodeOps::Prepare(const PrepareOp& op) {
  v1::NodePrepareRequest request;
  request.set_sequence(op.sequence);
  request.set_gather_id(op.gather_id);
  request.set_session_id(op.session_id);
  for (const auto& [unit, generation] : op.expected_generations) {
    (*request.mutable_expected_generations())[unit] = generation;
  }
  for (const auto& [unit, generation] : op.target_generations) {
    (*request.mutable_target_generations())[unit] = generation;
  }
  request.set_force(op.force);
  request.set_epoch(op.epoch);
  std::vector<int64_t> staged(membership_->size(), 0);
  const std::vector<absl::Status> votes = OnEveryNode(
      op.epoch,
      [&](int node) -> absl::Status {
        if (node == membership_->node_rank()) {
          absl::StatusOr<int64_t> bytes = local_->Prepare(op);
          if (bytes.ok()) staged[node] = *bytes;
          return bytes.status();
        }
        Call call(*this);
        v1::NodePrepareResponse response;
        const absl::Status status = FromGrpcStatus(
            Stub(node)->NodePrepare(call.get(), request, &response));
        staged[node] = response.staged_bytes();
        return status;
      },
      op.sequence);
  std::vector<std::optional<absl::Status>> decided(votes.begin(), votes.end());
  if (absl::Status status = core::DecideCommit(op.session_id, decided);
      !status.ok()) {
    return status;
  }
  int64_t total = 0;
  for (int64_t bytes : staged) total += bytes;
  return total;
}

absl::Status ClusterNodeOps::Commit(const CommitOp& op) {
  v1::NodeCommitRequest request;
  request.set_sequence(op.sequence);
  request.set_model(op.model);
  request.set_epoch(op.epoch);
  request.set_gather_id(op.gather_id);
  request.set_session_id(op.session_id);
  for (const auto& [unit, generation] : op.target_generations) {
    (*request.mutable_target_generations())[unit] = generation;
  }
  return FirstFailure(OnEveryNode(
      op.epoch,
      [&](int node) -> absl::Status {
        if (node == membership_->node_rank()) return local_->Commit(op);
        Call call(*this);
        v1::NodeCommitResponse response;
        return FromGrpcStatus(
            Stub(node)->NodeCommit(call.get(), request, &response));
      },
      op.sequence, /*decided=*/true));
}

absl::Status ClusterNodeOps::SetGenerations(const GenerationsOp& op,
                                            absl::Duration wait) {
  // The epoch the move was decided in, as every node operation carries.
  v1::NodeSetGenerationsRequest request;
  request.set_sequence(op.sequence);
  request.set_model(op.model);
  request.set_epoch(op.epoch);
  request.set_initialized(op.initialized);
  for (const auto& [unit, generation] : op.generations) {
    (*request.mutable_generations())[unit] = generation;
  }
  auto outcome = std::make_shared<Outcome>();
  auto set_everywhere = [this, op, request = std::move(request), outcome] {
    const absl::Status status = FirstFailure(OnEveryNode(
        op.epoch,
        [&](int node) -> absl::Status {
          if (node == membership_->node_rank()) {
            return local_->SetGenerations(op);
          }
          Call call(*this);
          v1::NodeSetGenerationsResponse response;
          return FromGrpcStatus(
              Stub(node)->NodeSetGenerations(call.get(), request, &response));
        },
        op.sequence));
    {
      absl::MutexLock lock(&mu_);
      --generations_unanswered_;
    }
    absl::MutexLock lock(&outcome->mu);
    outcome->done = true;
    outcome->status = status;
    if (outcome->abandoned && !status.ok()) {
      spdlog::error(
          "generations of model {} (operation {}) not set on every node: {}",
          op.model, op.sequence, status.ToString());
    }
  };
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("summond is stopping");
    // A node that has not answered an earlier move is silent: a caller who
    // may go on without the answer (a trainer's step) is not held for it
    // again.
    if (generations_unanswered_ > 0 && wait != absl::InfiniteDuration()) {
      wait = absl::ZeroDuration();
    }
    ++generations_unanswered_;
    JoinFinished();
    background_.push_back({std::thread(std::move(set_everywhere)), outcome});
  }
  absl::MutexLock lock(&outcome->mu);
  if (!outcome->mu.AwaitWithTimeout(absl::Condition(&outcome->done), wait)) {
    outcome->abandoned = true;
    return absl::DeadlineExceededError(absl::StrCat(
        "not every node took the generations of model '", op.model,
        "' (operation ", op.sequence, ") within ", absl::FormatDuration(wait),
        "; they are still being sent, in sequence"));
  }
  return outcome->status;
}

void ClusterNodeOps::JoinFinished() {
  for (auto it = background_.begin(); it != background_.end();) {
    bool done;
    {
      absl::MutexLock lock(&it->outcome->mu);
      done = it->outcome->done;
    }
    if (!done) {
      ++it;
      continue;
    }
    it->thread.join();  // It has only its return left.
    it = background_.erase(it);
  }
}

void ClusterNodeOps::Abort(const std::string& session_id) {
  v1::NodeAbortRequest request;
  request.set_session_id(session_id);
  const uint64_t epoch = membership_->epoch();
  request.set_epoch(epoch);
  // Here even while this node may not act (OnEveryNode skips its part
  // then), as on the other nodes: dropping staged data changes no shard
  // byte, and kept it would refuse every PREPARE of its ranks ("staging
  // area holds the writeback of ...") for the rest of the epoch.
  local_->Abort(session_id);
  OnEveryNode(epoch, [&](int node) -> absl::Status {
    if (node == membership_->node_rank()) return absl::OkStatus();
    grpc::ClientContext context;
    Deadline(context);
    v1::NodeAbortResponse response;
    return FromGrpcStatus(Stub(node)->NodeAbort(&context, request, &response));
  });
}

void ClusterNodeOps::Release(const std::string& gather_id) {
  local_->Release(gather_id);
  v1::NodeReleaseRequest request;
  request.set_gather_id(gather_id);
  ReleaseOnPeers(std::move(request));
}

void ClusterNodeOps::ReleaseSession(const std::string& session_id) {
  local_->ReleaseSession(session_id);
  v1::NodeReleaseRequest request;
  request.set_session_id(session_id);
  ReleaseOnPeers(std::move(request));
}

void ClusterNodeOps::ReleaseOnPeers(v1::NodeReleaseRequest request) {
  // The epoch the release was decided in, not the one it is sent in: a
  // re-form in between already dropped the copies on every node.
  request.set_epoch(membership_->epoch());
  Enqueue([this, request = std::move(request)] {
    for (int node : membership_->Members()) {
      if (node == membership_->node_rank()) continue;
      grpc::ClientContext context;
      Deadline(context);
      v1::NodeReleaseResponse response;
      Stub(node)->NodeRelease(&context, request, &response);
    }
  });
}

void ClusterNodeOps::Enqueue(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void ClusterNodeOps::Worker() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&has_work));
      if (tasks_.empty()) return;  // Stopping with nothing left.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace summon::server
