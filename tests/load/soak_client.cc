#include "tests/load/soak_client.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/lib/session_handle.h"
#include "client/lib/summon_client.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "summon/v1/summon.pb.h"

namespace summon::load {
namespace {

// Unexpected errors kept verbatim per client (all are counted).
constexpr size_t kMaxErrors = 8;
// Writers add kDeltaQuantum times 1..kMaxDeltaQuanta.
constexpr int kMaxDeltaQuanta = 8;
// Histogram bins asked of TensorStats.
constexpr uint32_t kStatsBins = 4;

class SoakClient {
 public:
  SoakClient(int index, const SoakModel& model, const SoakOptions& options,
             ClientProgress& progress)
      : index_(index),
        model_(model),
        options_(options),
        progress_(progress),
        random_(static_cast<uint64_t>(index)) {}

  ClientReport Run() {
    int sessions_on_channel = 0;
    while (absl::Now() < options_.end) {
      if (client_ == nullptr ||
          sessions_on_channel == options_.sessions_per_channel) {
        Connect();
        sessions_on_channel = 0;
      }
      const double dice = Uniform();
      if (dice < options_.list_fraction) {
        ListSessions();
        continue;
      }
      if (dice < options_.list_fraction + options_.write_fraction) {
        WritableSession();
      } else {
        ReadOnlySession();
      }
      ++sessions_on_channel;
    }
    client_.reset();
    progress_.done.store(true);
    return std::move(report_);
  }

 private:
  void Connect() {
    grpc::ChannelArguments arguments;
    // Its own TCP connection, as a separate process would have: equal
    // channels otherwise share one subchannel.
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    client::ClientOptions client_options;
    client_options.principal = PrincipalOf(index_);
    client_options.timeout = options_.call_timeout;
    // A fresh TCP connect under this load now and then fails at once
    // (UNAVAILABLE "failed to connect to all addresses"), leaving the
    // channel in backoff; a patient client waits for it within the call's
    // deadline, so only a daemon unreachable for that long counts.
    client_options.wait_for_ready = true;
    client_ = std::make_unique<client::SummonClient>(
        grpc::CreateCustomChannel(
            options_.targets[index_ % options_.targets.size()],
            grpc::InsecureChannelCredentials(), arguments),
        std::move(client_options));
  }

  // Runs `call` as `op`: published to the watchdog, timed when it succeeds.
  template <typename Call>
  auto Timed(Op op, Call&& call) {
    progress_.op_started_unix_ms.store(absl::ToUnixMillis(absl::Now()));
    progress_.op.store(static_cast<int>(op));
    const auto start = std::chrono::steady_clock::now();
    auto result = call();
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    progress_.op.store(-1);
    if (result.ok()) {
      report_.latencies_ms[static_cast<int>(op)].push_back(ms);
    }
    return result;
  }

  void Unexpected(Op op, const absl::Status& status) {
    ++report_.unexpected[static_cast<int>(op)];
    if (report_.errors.size() < kMaxErrors) {
      report_.errors.push_back(absl::StrCat("client ", index_, " ", OpName(op),
                                            ": ", status.ToString()));
    }
  }

  double Uniform() {
    return std::uniform_real_distribution<double>(0, 1)(random_);
  }
  // Uniform in [0, n).
  int Below(int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(random_);
  }

  // Reads elements [first, first + count) of `tensor` in a random chunk size
  // and returns the delta they all carry (UniformDelta).
  absl::StatusOr<double> ReadDelta(const std::string& session, int tensor,
                                   int64_t first, int64_t count) {
    static constexpr uint32_t kChunkBytes[] = {0, 4096, 65536};
    const SoakModel::Tensor& t = model_.tensors()[tensor];
    client::ReadTensorParams params;
    params.tensor = {session, t.fqn, false};
    params.element_offset = first;
    params.element_count = count;
    params.chunk_bytes = kChunkBytes[Below(3)];
    absl::StatusOr<client::TensorData> data =
        Timed(Op::kRead, [&] { return client_->ReadTensor(params); });
    if (!data.ok()) return data.status();
    return UniformDelta(t, first, data->data);
  }

  void ReadOnlySession() {
    v1::SessionOptions options;
    options.set_writeback(false);
    const int tensors = static_cast<int>(model_.tensors().size());
    std::vector<int> scoped = {Below(tensors)};
    if (Uniform() < 0.5) {
      options.mutable_module()->set_fqn(model_.tensors()[scoped[0]].unit);
      options.mutable_module()->set_recurse(false);
    } else {
      // A DeepSpeed-style list spanning two units.
      scoped.push_back((scoped[0] + 1 + Below(tensors - 1)) % tensors);
      for (int tensor : scoped) {
        options.mutable_params()->add_fqns(model_.tensors()[tensor].fqn);
      }
    }
    absl::StatusOr<std::unique_ptr<client::Session>> session =
        Timed(Op::kOpenReadOnly,
              [&] { return client_->Open(options_.model, options); });
    if (!session.ok()) {
      Unexpected(Op::kOpenReadOnly, session.status());
      return;
    }
    const std::string& id = (*session)->id();
    absl::StatusOr<v1::TensorStatsResponse> stats = Timed(Op::kStats, [&] {
      return client_->TensorStats(id, {}, /*grad=*/false, kStatsBins);
    });
    if (!stats.ok()) {
      Unexpected(Op::kStats, stats.status());
    } else if (stats->tensors_size() != static_cast<int>(scoped.size())) {
      Unexpected(Op::kStats,
                 absl::DataLossError(absl::StrCat(
                     "stats of ", stats->tensors_size(), " tensors for ",
                     scoped.size(), " scoped parameters")));
    }
    for (int tensor : scoped) {
      const absl::StatusOr<double> delta =
          ReadDelta(id, tensor, 0, model_.tensors()[tensor].numel);
      if (!delta.ok()) Unexpected(Op::kRead, delta.status());
    }
    absl::StatusOr<v1::CloseSessionResponse> closed =
        Timed(Op::kCloseReadOnly, [&] { return (*session)->Close(); });
    if (!closed.ok()) {
      Unexpected(Op::kCloseReadOnly, closed.status());
    } else if (closed->written_back()) {
      Unexpected(Op::kCloseReadOnly,
                 absl::DataLossError("a read-only session was written back"));
    }
  }

  void WritableSession() {
    const int tensor = Uniform() < options_.hot_fraction
                           ? model_.hot(Below(model_.hot_units()))
                           : index_;
    const SoakModel::Tensor& t = model_.tensors()[tensor];
    v1::SessionOptions options;
    options.set_writeback(true);
    options.mutable_module()->set_fqn(t.unit);
    options.mutable_module()->set_recurse(false);
    absl::StatusOr<std::unique_ptr<client::Session>> session =
        Timed(Op::kOpenWritable,
              [&] { return client_->Open(options_.model, options); });
    if (absl::IsFailedPrecondition(session.status())) {
      ++report_.refused[static_cast<int>(Op::kOpenWritable)];
      return;
    }
    if (!session.ok()) {
      Unexpected(Op::kOpenWritable, session.status());
      return;
    }
    const absl::StatusOr<double> delta = AddDelta(**session, tensor);
    if (!delta.ok()) {
      (*session)->Abort().IgnoreError();
      return;
    }
    absl::StatusOr<v1::CloseSessionResponse> closed =
        Timed(Op::kCloseWriteback, [&] { return (*session)->Close(); });
    if (!closed.ok()) {
      Unexpected(Op::kCloseWriteback, closed.status());
      return;
    }
    for (const v1::UnitGeneration& generation : closed->generations()) {
      if (closed->written_back() && generation.unit() == t.unit) {
        report_.writebacks.push_back({tensor, generation.generation(), *delta});
        return;
      }
    }
    Unexpected(Op::kCloseWriteback,
               absl::DataLossError(absl::StrCat("writeback of ", t.unit,
                                                " reported no new generation: ",
                                                closed->ShortDebugString())));
  }

  // Reads `tensor` in `session`, writes it back plus a delta and checks that
  // the session reads the edit back. Returns the delta; errors are reported
  // as unexpected and returned.
  absl::StatusOr<double> AddDelta(client::Session& session, int tensor) {
    const SoakModel::Tensor& t = model_.tensors()[tensor];
    const absl::StatusOr<double> before =
        ReadDelta(session.id(), tensor, 0, t.numel);
    if (!before.ok()) {
      Unexpected(Op::kRead, before.status());
      return before.status();
    }
    const double delta = kDeltaQuantum * (1 + Below(kMaxDeltaQuanta));
    std::string bytes(t.numel * sizeof(double), '\0');
    for (int64_t i = 0; i < t.numel; ++i) {
      const double value = t.seeded[i] + *before + delta;
      std::memcpy(bytes.data() + i * sizeof(double), &value, sizeof(double));
    }
    client::WriteTensorParams params;
    params.tensor = {session.id(), t.fqn, false};
    params.dtype = v1::DTYPE_FLOAT64;
    const absl::Status written = Timed(Op::kWrite, [&] {
                                   return client_->WriteTensor(params, bytes);
                                 }).status();
    if (!written.ok()) {
      Unexpected(Op::kWrite, written);
      return written;
    }
    // Read-your-writes on a random range.
    const int64_t first = Below(t.numel);
    const absl::StatusOr<double> after =
        ReadDelta(session.id(), tensor, first, 1 + Below(t.numel - first));
    absl::Status checked = after.status();
    if (after.ok() && *after != *before + delta) {
      checked = absl::DataLossError(absl::StrCat(t.fqn, " reads seeded + ",
                                                 *after, " after writing ",
                                                 "seeded + ", *before + delta));
    }
    if (!checked.ok()) {
      Unexpected(Op::kRead, checked);
      return checked;
    }
    return delta;
  }

  void ListSessions() {
    absl::StatusOr<v1::ListSessionsResponse> listed =
        Timed(Op::kListSessions,
              [&] { return client_->ListSessions(options_.model); });
    if (!listed.ok()) {
      Unexpected(Op::kListSessions, listed.status());
      return;
    }
    // R12: a caller sees only the sessions it may operate.
    for (const v1::Session& session : listed->sessions()) {
      if (session.owner() != PrincipalOf(index_)) {
        Unexpected(Op::kListSessions,
                   absl::DataLossError(absl::StrCat(
                       "listed session ", session.id(), " of ", session.owner(),
                       " to ", PrincipalOf(index_))));
      }
    }
  }

  const int index_;
  const SoakModel& model_;
  const SoakOptions& options_;
  ClientProgress& progress_;
  std::mt19937_64 random_;
  std::unique_ptr<client::SummonClient> client_;
  ClientReport report_;
};

}  // namespace

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kOpenReadOnly:
      return "open_readonly";
    case Op::kOpenWritable:
      return "open_writable";
    case Op::kStats:
      return "stats";
    case Op::kRead:
      return "read";
    case Op::kWrite:
      return "write";
    case Op::kCloseReadOnly:
      return "close_readonly";
    case Op::kCloseWriteback:
      return "close_writeback";
    case Op::kListSessions:
      return "list_sessions";
  }
  return "?";
}

std::string PrincipalOf(int index) { return absl::StrCat("soak-", index); }

ClientReport RunSoakClient(int index, const SoakModel& model,
                           const SoakOptions& options,
                           ClientProgress& progress) {
  return SoakClient(index, model, options, progress).Run();
}

}  // namespace summon::load
