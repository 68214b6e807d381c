// NodeRuntime: the leader's order of collectives (InSequence), the gather
// of a session's copies (this node's slices, the exchange between nodes,
// unpacking), releasing copies and resetting after a failure. Placement is
// in node_placement.cc, the exchange buffers in node_exchange.cc, tensor
// access in node_copies.cc, the writeback in node_writeback.cc.

#include "server/runtime/node_runtime.h"

#include <algorithm>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/runtime/fault_points.h"
#include "server/runtime/gather_copy.h"

namespace summon::server {

NodeRuntime::NodeRuntime(int node, ModelRegistry* registry,
                         Communicator* communicator,
                         absl::Duration collective_timeout,
                         std::shared_ptr<BufferPool> copy_pool)
    : node_(node),
      registry_(registry),
      communicator_(communicator),
      collective_timeout_(collective_timeout),
      pool_(copy_pool != nullptr ? std::move(copy_pool)
                                 : BufferPool::Create()) {}

NodeRuntime::~NodeRuntime() = default;

void NodeRuntime::SetCommunicator(Communicator* communicator) {
  communicator_.store(communicator);
}

void NodeRuntime::SetAbsentNodes(std::set<int> absent) {
  absl::MutexLock lock(&mu_);
  absent_ = std::move(absent);
}

void NodeRuntime::SetDeviceCommunicator(Communicator* communicator) {
  device_communicator_.store(communicator);
}

CollectiveOptions NodeRuntime::Collective(uint64_t sequence) const {
  CollectiveOptions options;
  options.tag = sequence;
  options.timeout = collective_timeout_;
  return options;
}

uint64_t NodeRuntime::Resets() const {
  absl::MutexLock lock(&mu_);
  return resets_;
}

absl::Status NodeRuntime::InSequence(uint64_t sequence,
                                     const std::function<absl::Status()>& body,
                                     std::optional<uint64_t> taken_in) {
  {
    absl::MutexLock lock(&mu_);
    const uint64_t resets = taken_in.value_or(resets_);
    auto turn = [this, sequence, resets]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return next_sequence_ >= sequence || resets_ != resets;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&turn), collective_timeout_)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "node ", node_, " waited ", absl::FormatDuration(collective_timeout_),
          " for operation ", sequence, " but is still at ", next_sequence_));
    }
    if (resets_ != resets) {
      return absl::AbortedError(absl::StrCat(
          "operation ", sequence, " belongs to a cluster epoch that ended"));
    }
    if (next_sequence_ != sequence) {
      return absl::FailedPreconditionError(
          absl::StrCat("operation ", sequence, " arrived after node ", node_,
                       " moved on to ", next_sequence_));
    }
  }
  absl::Status status = body();
  absl::MutexLock lock(&mu_);
  ++next_sequence_;
  return status;
}

absl::Status NodeRuntime::SkipSequence(uint64_t sequence) {
  return InSequence(sequence, [] { return absl::OkStatus(); });
}

absl::StatusOr<std::shared_ptr<GatherCopy>> NodeRuntime::FindCopy(
    const std::string& gather_id) const {
  absl::MutexLock lock(&mu_);
  auto it = copies_.find(gather_id);
  if (it == copies_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node ", node_, " has no gather ", gather_id));
  }
  return it->second;
}

bool NodeRuntime::HasCopy(const std::string& gather_id) const {
  absl::StatusOr<std::shared_ptr<GatherCopy>> copy = FindCopy(gather_id);
  return copy.ok() && (*copy)->copy_index >= 0;
}

int64_t NodeRuntime::CopyBytes() const {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const auto& [id, copy] : copies_) {
    if (copy->copy_index >= 0) {
      bytes += copy->layout.total_bytes * (copy->grads ? 2 : 1);
    }
  }
  return bytes;
}

absl::Status NodeRuntime::Gather(const GatherOp& op) {
  absl::StatusOr<std::shared_ptr<ModelEntry>> model = registry_->Get(op.model);
  if (!model.ok()) return model.status();
  const core::ModelSpec& spec = (*model)->spec;
  absl::StatusOr<core::Scope> scope = core::ResolveScope(spec, op.scope);
  if (!scope.ok()) return scope.status();
  // A follower takes an epoch's communicator a moment after the leader
  // (once its own rendezvous returned): the leader's first gather of an
  // epoch (a returning node's catch-up) may arrive before it, and must not
  // fail in sequence while the other nodes wait for it, nor plan with
  // the previous epoch's absent nodes (set just before the communicator).
  // Counted before the wait: a gather of an epoch that ends meanwhile (its
  // communicator dropped) must not run on the next epoch's.
  const uint64_t resets = Resets();
  const absl::Time connected_by = absl::Now() + kConnectWait;
  while (spec.groups.topology.nodes > 1 && communicator_.load() == nullptr &&
         absl::Now() < connected_by) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto copy = std::make_shared<GatherCopy>();
  copy->model = *model;
  copy->layout = core::LayoutSessionBuffer(spec, *scope);
  core::NodeSets nodes;
  {
    absl::MutexLock lock(&mu_);
    nodes.absent = absent_;
  }
  nodes.stale.insert(op.stale_nodes.begin(), op.stale_nodes.end());
  copy->absent = nodes.absent;
  if (!nodes.stale.empty()) {
    // A catch-up's writeback goes to the stale nodes only: the others
    // already hold these bytes (and a trainer may be writing them).
    for (int node = 0; node < spec.groups.topology.nodes; ++node) {
      if (nodes.stale.count(node) == 0) copy->absent.insert(node);
    }
  }
  absl::StatusOr<core::GatherPlan> plan = core::PlanGather(
      spec, copy->layout,
      op.rank0_only ? core::Placement::kHomeRank : core::Placement::kPerNode,
      op.home_rank, nodes);
  if (!plan.ok()) return plan.status();
  copy->plan = *std::move(plan);
  copy->rank0_only = op.rank0_only;
  copy->home_node = spec.groups.topology.NodeOf(op.home_rank);
  copy->grads = op.grads;
  copy->read_only = op.read_only;
  for (size_t c = 0; c < copy->plan.copies.size(); ++c) {
    if (copy->plan.copies[c].node == node_) {
      copy->copy_index = static_cast<int>(c);
      break;
    }
  }
  const bool device_placed = (*model)->store != nullptr &&
                             (*model)->store->on_device() && !op.offload_to_cpu;
  copy->on_device =
      device_placed && copy->copy_index >= 0 && copy->layout.total_bytes > 0;
  // Every node decides alike: the same configuration, the same session.
  copy->device_exchange = device_exchange_enabled_ && device_placed &&
                          spec.groups.topology.nodes > 1;
  if (copy->on_device) copy->device_rank = DeviceRank(*copy, op.home_rank);

  const auto exchange = [&]() -> absl::Status {
    ModelEntry& entry = **model;
    ShardStore& store = *entry.store;
    const int nodes = spec.groups.topology.nodes;
    const std::vector<std::vector<core::ShardRange>> sent =
        core::RangesSentByNode(spec, copy->plan);
    const int grads_factor = copy->grads ? 2 : 1;
    absl::MutexLock copy_lock(&copy->mu);
    if (copy->copy_index >= 0) {
      if (absl::Status allocated = AllocateCopy(*copy, store);
          !allocated.ok()) {
        return allocated;
      }
    }
    // When the exchange's layout is the copy's (and no gradients ride
    // along), peers' ranges are received straight into the copy and this
    // node's part is sent from it in place: no packing, no receive buffer,
    // no unpacking.
    // (The copy must sit where the exchange runs: host memory for Gloo,
    // the device communicator's GPU for a device exchange.)
    const bool in_place =
        nodes > 1 && copy->copy_index >= 0 && !copy->grads &&
        copy->on_device == copy->device_exchange &&
        core::ExchangeLandsInCopy(spec, copy->plan, copy->copy_index);
    // Where each node's ranges sit in the exchange: concatenated in node
    // order.
    std::vector<int64_t> recv_sizes(nodes);
    std::vector<int64_t> recv_offsets(nodes);
    int64_t total = 0;
    for (int n = 0; n < nodes; ++n) {
      recv_sizes[n] = core::RangesBytes(sent[n]) * grads_factor;
      recv_offsets[n] = total;
      total += recv_sizes[n];
    }
    if (Pipelines(*copy)) {
      return PipelinedGather(*copy, recv_offsets, recv_sizes, op.sequence);
    }
    ExchangeBuffers buffers;
    // Pack what this node sends and copy its local slices into its own copy
    // under one shard lock: the node's part of the snapshot is consistent.
    {
      absl::ReaderMutexLock shards_lock(&entry.shards_mu);
      if (!in_place && nodes > 1) {
        if (absl::Status packed = buffers.Pack(*copy, store, sent[node_]);
            !packed.ok()) {
          return packed;
        }
      }
      if (copy->copy_index >= 0) {
        if (absl::Status copied = CopyLocalSlices(*copy, store); !copied.ok()) {
          return copied;
        }
      }
    }
    if (nodes == 1) return absl::OkStatus();
    FaultPoint("gather.before_exchange");

    // Exchange: every node's ranges reach the nodes holding copies.
    void* into = nullptr;
    const void* mine = nullptr;
    if (in_place) {
      uint8_t* base =
          copy->device_exchange
              ? static_cast<uint8_t*>(copy->device_params->device_data())
              : copy->params.data();
      into = base;
      mine = base + recv_offsets[node_];
    } else {
      if (copy->copy_index >= 0) {
        if (absl::Status made =
                buffers.MakeReceive(*copy, store, total, copy->device_exchange);
            !made.ok()) {
          return made;
        }
      }
      into = buffers.ReceiveData();
      mine = buffers.SendData();
    }
    Communicator* communicator = copy->device_exchange
                                     ? device_communicator_.load()
                                     : communicator_.load();
    if (communicator == nullptr) {
      return absl::UnavailableError("the cluster is not connected yet");
    }
    absl::Status exchanged =
        copy->rank0_only
            ? communicator->Gather(mine, recv_sizes[node_], into, recv_sizes,
                                   copy->home_node, Collective(op.sequence))
            : communicator->AllGatherV(mine, recv_sizes[node_], into,
                                       recv_sizes, Collective(op.sequence));
    if (!exchanged.ok() || copy->copy_index < 0 || in_place) return exchanged;

    // Unpack the remote slices this node's copy needs.
    for (int n = 0; n < nodes; ++n) {
      if (n == node_) continue;
      int64_t at = 0;
      std::map<core::ShardRange, int64_t> position;
      for (const core::ShardRange& range : sent[n]) {
        position[range] = at;
        at += std::get<3>(range);
      }
      const int64_t grads_at = core::RangesBytes(sent[n]);
      for (const core::Transfer& t : copy->plan.transfers) {
        if (t.copy != copy->copy_index ||
            spec.groups.topology.NodeOf(t.rank) != n) {
          continue;
        }
        const int64_t from =
            recv_offsets[n] + position.at(core::ShardRange{
                                  t.rank, t.unit, t.shard_offset, t.bytes});
        absl::Status unpacked = buffers.Unpack(*copy, /*grad=*/false, from,
                                               t.buffer_offset, t.bytes);
        if (unpacked.ok() && copy->grads) {
          unpacked = buffers.Unpack(*copy, /*grad=*/true, from + grads_at,
                                    t.buffer_offset, t.bytes);
        }
        if (!unpacked.ok()) return unpacked;
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status status = InSequence(op.sequence, exchange, resets);
      !status.ok()) {
    return status;
  }
  // Outside the sequence: the next collective need not wait for the copies
  // between this node's GPUs, and nothing sees this copy until it is kept.
  {
    absl::MutexLock copy_lock(&copy->mu);
    if (absl::Status replicated = Replicate(*copy, *(*model)->store);
        !replicated.ok()) {
      return replicated;
    }
  }
  // A writable session will likely write back: its staging is made and
  // faulted now, in the background, instead of in its writeback's PREPARE.
  if (!op.read_only) (*model)->store->PrefaultStaging(op.grads);
  absl::MutexLock lock(&mu_);
  copies_[op.gather_id] = copy;
  return absl::OkStatus();
}

void NodeRuntime::Release(const std::string& gather_id) {
  std::shared_ptr<GatherCopy> copy;
  {
    absl::MutexLock lock(&mu_);
    auto it = copies_.find(gather_id);
    if (it == copies_.end()) return;
    copy = std::move(it->second);
    copies_.erase(it);
  }
  // Pairs with Gather's PrefaultStaging: the spare staging's idle clock
  // starts when the model's last writable session here is gone.
  if (!copy->read_only) copy->model->store->WritableClosed();
}

void NodeRuntime::ReleaseSession(const std::string& session_id) {
  std::vector<std::shared_ptr<GatherCopy>> copies;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, copy] : copies_) copies.push_back(copy);
  }
  for (const std::shared_ptr<GatherCopy>& copy : copies) {
    absl::MutexLock copy_lock(&copy->mu);
    for (auto it = copy->privates.begin(); it != copy->privates.end();) {
      it = std::get<0>(it->first) == session_id ? copy->privates.erase(it)
                                                : std::next(it);
    }
  }
}

void NodeRuntime::Reset() {
  absl::MutexLock lock(&mu_);
  copies_.clear();
  next_sequence_ = 1;
  ++resets_;
}

}  // namespace summon::server
