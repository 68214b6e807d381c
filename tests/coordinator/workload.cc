#include "tests/coordinator/workload.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/lib/summon_client.h"
#include "tests/cluster/cluster_values.h"

namespace summon::tests {
namespace {

constexpr uint64_t kWriteSeedBase = 1000;
constexpr uint64_t kSeedsPerWriter = 100000;
constexpr uint32_t kWriterLeaseSeconds = 300;

// The epoch `node` reports now; 0 when it does not answer (electing).
uint64_t EpochOf(const client::SummonClient& node) {
  absl::StatusOr<v1::ClusterStatus> status = node.GetClusterStatus();
  return status.ok() ? status->epoch() : 0;
}

}  // namespace

const std::map<std::string, std::string>& Workload::UnitOf() {
  static const auto* const unit_of = new std::map<std::string, std::string>{
      {"embed.w", ""},
      {"norm.w", ""},
      {"layers.0.attn.w", "layers.0"},
      {"layers.0.attn.b", "layers.0"},
      {"layers.0.mlp.w", "layers.0"},
      {"layers.1.w", "layers.1"},
  };
  return *unit_of;
}

Workload::Workload(Options options) : options_(std::move(options)) {
  units_ = {"", "layers.0", "layers.1"};
}

Workload::~Workload() { Stop(); }

void Workload::Start() {
  for (int reader = 0; reader < options_.readers; ++reader) {
    threads_.emplace_back([this, reader] { Reader(reader); });
  }
  for (size_t writer = 0; writer < units_.size(); ++writer) {
    threads_.emplace_back([this, writer] { Writer(static_cast<int>(writer)); });
  }
  threads_.emplace_back([this] { Trainer(); });
}

void Workload::Stop() {
  stop_ = true;
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void Workload::Record(Op op) {
  op.end = absl::Now();
  if (op.outcome == Outcome::kOk) {
    ++succeeded_;
    if (op.kind == OpKind::kRead) ++reads_served_;
    if (op.kind == OpKind::kWrite) ++writes_acked_;
  }
  ++recorded_;
  history_.Record(std::move(op));
}

std::vector<std::string> Workload::TensorsOf(const std::string& unit) const {
  std::vector<std::string> fqns;
  for (const auto& [fqn, of] : UnitOf()) {
    if (of == unit) fqns.push_back(fqn);
  }
  return fqns;
}

std::string Workload::Values(const std::string& fqn, uint64_t seed) const {
  for (const auto& [name, numel] : PrimaryParams(options_.description)) {
    if (name == fqn) {
      return SeededBytes(fqn, numel, v1::DTYPE_FLOAT32, seed);
    }
  }
  return "";
}

void Workload::Reader(int reader) {
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  const int nodes = static_cast<int>(options_.addresses.size());
  for (int turn = 0; !stop_; ++turn) {
    Op op;
    op.kind = OpKind::kRead;
    op.worker = reader;
    op.node = (reader + turn) % nodes;
    op.unit = units_[(reader + turn / nodes) % units_.size()];
    op.start = absl::Now();
    client::SummonClient node(options_.addresses[op.node], client_options);
    op.epoch = EpochOf(node);
    const std::vector<std::string> fqns = TensorsOf(op.unit);
    absl::StatusOr<v1::Session> session =
        node.OpenSession(options_.model, ReadOnly(ParamScope(fqns)));
    absl::Status status = session.status();
    if (session.ok()) {
      for (const v1::UnitGeneration& unit : session->gathered_generations()) {
        if (unit.unit() == op.unit) op.generation = unit.generation();
      }
      for (const std::string& fqn : fqns) {
        client::ReadTensorParams read;
        read.tensor = {session->id(), fqn, false};
        absl::StatusOr<client::TensorData> data = node.ReadTensor(read);
        if (!data.ok()) {
          status = data.status();
          break;
        }
        op.checksums[fqn] = BytesChecksum(data->data);
      }
      node.CloseSession(session->id()).IgnoreError();
    }
    op.outcome = status.ok() ? Outcome::kOk : Outcome::kFailed;
    op.error = status.ok() ? "" : status.ToString();
    if (!status.ok()) op.checksums.clear();
    Record(std::move(op));
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
}

void Workload::Writer(int writer) {
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  const int nodes = static_cast<int>(options_.addresses.size());
  const std::string& unit = units_[writer];
  const std::vector<std::string> fqns = TensorsOf(unit);
  // A session of this writer that is still open because its abort was
  // refused (UNAVAILABLE while the cluster could not act, e.g. etcd without
  // quorum): it holds the unit, so every later open would be refused until
  // its lease ends. As a client should, the abort is sent again before the
  // next open.
  std::string unaborted;
  // A lease past the scenarios' recovery window (60 s): a session left open
  // by mistake holds its unit beyond it instead of expiring just in time.
  v1::SessionOptions scope = ParamScope(fqns);
  scope.set_lease_seconds(kWriterLeaseSeconds);
  const auto abort = [&](client::SummonClient& node, const std::string& id) {
    const absl::Status aborted = node.CloseSession(id, /*abort=*/true).status();
    // Anything but a refusal to act now ends it: OK, or the session is
    // already gone (NOT_FOUND, FAILED_PRECONDITION: ended, or its own close
    // still under way and ending it).
    const bool refused =
        absl::IsUnavailable(aborted) || absl::IsDeadlineExceeded(aborted);
    unaborted = refused ? id : "";
  };
  for (int k = 0; !stop_; ++k) {
    Op op;
    op.kind = OpKind::kWrite;
    op.worker = writer;
    op.node = (writer + k) % nodes;
    op.unit = unit;
    op.seed = kWriteSeedBase + writer * kSeedsPerWriter + k;
    for (const std::string& fqn : fqns) {
      op.checksums[fqn] = BytesChecksum(Values(fqn, op.seed));
    }
    client::SummonClient node(options_.addresses[op.node], client_options);
    // Not part of this write (whose interval the checker reads).
    if (!unaborted.empty()) abort(node, unaborted);
    op.start = absl::Now();
    absl::StatusOr<v1::Session> session =
        node.OpenSession(options_.model, scope);
    absl::Status status = session.status();
    for (size_t i = 0; status.ok() && i < fqns.size(); ++i) {
      client::WriteTensorParams params;
      params.tensor = {session->id(), fqns[i], false};
      params.dtype = v1::DTYPE_FLOAT32;
      status = node.WriteTensor(params, Values(fqns[i], op.seed)).status();
    }
    if (!status.ok()) {
      // Nothing was sent for writeback: the write failed.
      if (session.ok()) abort(node, session->id());
      op.outcome = Outcome::kFailed;
      op.error = status.ToString();
    } else {
      // The epoch the writeback is sent in (as far as this node knows).
      op.epoch = EpochOf(node);
      status = node.CloseSession(session->id()).status();
      if (status.ok()) {
        op.outcome = Outcome::kOk;
      } else {
        op.outcome =
            absl::IsAborted(status) ? Outcome::kFailed : Outcome::kUnknown;
        op.error = status.ToString();
        // Ends a session left open (R7 keeps it open; a lost node may
        // have too); a writeback in flight stays unknown either way.
        abort(node, session->id());
      }
    }
    Record(std::move(op));
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
}

void Workload::Trainer() {
  client::ClientOptions client_options;
  client_options.timeout = options_.call_timeout;
  const int nodes = static_cast<int>(options_.addresses.size());
  const v1::TrainingPhase kPhases[] = {
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BACKWARD,
      v1::TRAINING_PHASE_OPTIMIZER, v1::TRAINING_PHASE_IDLE};
  for (int64_t step = 0; !stop_; ++step) {
    for (v1::TrainingPhase phase : kPhases) {
      for (int rank = 0; rank < nodes * options_.local_ranks; ++rank) {
        Op op;
        op.kind = OpKind::kPhase;
        op.worker = rank;
        op.node = rank / options_.local_ranks;
        op.start = absl::Now();
        client::SummonClient node(options_.addresses[op.node], client_options);
        op.epoch = EpochOf(node);
        const absl::Status status =
            node.ReportPhase(options_.model, rank, phase, step).status();
        op.outcome = status.ok() ? Outcome::kOk : Outcome::kFailed;
        op.error = status.ok() ? "" : status.ToString();
        Record(std::move(op));
      }
      absl::SleepFor(options_.trainer_pace);
    }
  }
}

}  // namespace summon::tests
