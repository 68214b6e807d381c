#include "tests/fuzz/rpc_fuzz_daemon.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/model_spec.h"
#include "grpcpp/grpcpp.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/membership.h"
#include "server/model/model_registry.h"
#include "server/runtime/node_runtime.h"
#include "server/service/local_fd_broker.h"
#include "server/service/peer_service.h"
#include "server/service/summon_service.h"
#include "server/service/trainer_service.h"
#include "server/session/session_manager.h"
#include "server/store/shard_store.h"
#include "server/watch/watch_store.h"
#include "summon/v1/peer.grpc.pb.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

#include "tests/fuzz/rpc_fuzz_frames.h"

namespace summon::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kMaxPhaseWaitMs = 20;
constexpr int kMaxReadChunks = 64;
// The principal of calls without "summon-principal" metadata, as all of the
// fuzzer's are.
constexpr char kPrincipal[] = "anonymous";

constexpr char kBaseLayout[] = R"({
  "strategy": "FULL_SHARD", "use_orig_params": true,
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.w", "shape": [5, 5], "dtype": "float32"},
      {"fqn": "layers.0.b", "shape": [5], "dtype": "float32"}]}]})";

class Daemon : public FuzzDaemon {
 public:
  Daemon() : instance_(Instance()), checkpoints_(CheckpointDirectory()) {
    fs::create_directories(checkpoints_);
    // No data_dir: nothing persists, and the registry unlinks its shared
    // memory when destroyed.
    summon::server::ModelRegistry::Options registry_options;
    registry_options.instance = instance_;
    registry_options.topology = {/*nodes=*/1, kLocalRanks};
    registry_ = std::make_unique<summon::server::ModelRegistry>(
        std::move(registry_options));
    summon::server::SessionManager::Options options;
    options.memory_budget_bytes = 16 << 20;
    sessions_ = std::make_unique<summon::server::SessionManager>(
        registry_.get(), options);
    summon::server::TrainerLeases::Options trainer_options;
    trainer_options.reap_interval = absl::ZeroDuration();
    trainers_ = std::make_unique<summon::server::TrainerLeases>(
        registry_.get(), trainer_options);
    // Grants expire at once: nothing granted piles up over a run.
    auto broker = summon::server::LocalFdBroker::Start(absl::Milliseconds(1));
    if (!broker.ok()) Fail("the map broker did not start");
    fd_broker_ = *std::move(broker);
    summon_ = std::make_unique<summon::server::SummonServiceImpl>(
        registry_.get(), sessions_.get(), trainers_.get(),
        std::vector<std::string>{checkpoints_.string()}, &authorizer_,
        /*cluster=*/nullptr, /*max_open_streams=*/0, fd_broker_.get());
    trainer_ = std::make_unique<summon::server::TrainerServiceImpl>(
        registry_.get(), sessions_.get(), trainers_.get(), &authorizer_);
    // A node of a one-node "cluster" that never forms (epoch 0): only its
    // Peer handlers are called.
    summon::server::Membership::Spec node;
    node.nodes = {"127.0.0.1:1"};
    node.local_ranks = kLocalRanks;
    membership_ =
        std::make_unique<summon::server::Membership>(node, &kv_store_);
    runtime_ = std::make_unique<summon::server::NodeRuntime>(
        0, registry_.get(), nullptr, absl::Seconds(1));
    peer_ = std::make_unique<summon::server::PeerServiceImpl>(
        kv_store_, membership_.get(), registry_.get(), runtime_.get(),
        &authorizer_);
    FreshWatches();
    grpc::ServerBuilder builder;
    builder.RegisterService(summon_.get());
    builder.RegisterService(trainer_.get());
    builder.RegisterService(peer_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) Fail("the in-process server did not start");
    auto channel = server_->InProcessChannel(grpc::ChannelArguments());
    summon_stub_ = v1::Summon::NewStub(channel);
    trainer_stub_ = v1::Trainer::NewStub(channel);
    peer_stub_ = v1::Peer::NewStub(channel);
  }

  // Unlinks every model's shared memory (the registry has no data_dir).
  ~Daemon() override {
    server_->Shutdown();
    server_.reset();
    peer_.reset();
    runtime_.reset();
    sessions_.reset();
    registry_.reset();
    std::error_code ignored;
    fs::remove_all(checkpoints_, ignored);
  }

  void Run(const std::vector<Frame>& frames) override {
    CreateBaseModel();
    for (size_t i = 0; i < frames.size();) {
      if (frames[i].rpc == Rpc::kWriteTensor) {
        size_t end = i;
        while (end < frames.size() && frames[end].rpc == Rpc::kWriteTensor) {
          ++end;
        }
        WriteStream(frames, i, end);
        i = end;
      } else {
        Send(frames[i]);
        ++i;
      }
    }
    Reset();
  }

 private:
  // Straight through the registry, as is the cleanup: only the fuzzed
  // requests pay for the trip through gRPC.
  void CreateBaseModel() {
    summon::server::ModelInit seeded;
    seeded.kind = summon::server::ModelInit::Kind::kSeeded;
    seeded.seed = 7;
    const absl::Status status =
        registry_
            ->Create("m", kBaseLayout, std::nullopt, seeded, /*grad_ranks=*/{1},
                     summon::server::ModelInit())
            .status();
    if (!status.ok()) Fail("base model: " + status.ToString());
  }

  // Each input starts with no watch (a removed one leaves a tombstone).
  void FreshWatches() {
    watches_ = std::make_unique<summon::server::WatchStore>("", 16);
    summon_->SetWatches(watches_.get());
    peer_->SetWatches(watches_.get());
  }

  void UseLastSession(std::string* id) const {
    if (id->empty()) *id = last_session_;
  }

  template <typename Stub, typename Request, typename Response>
  void Unary(Stub& stub,
             grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                          Response*),
             const Request& request, absl::string_view name,
             Response* response) {
    grpc::ClientContext context;
    CheckStatus((stub.*method)(&context, request, response), name);
  }

  // Parses the payload as `Request`, lets `fix` adjust it and calls `method`.
  template <typename Stub, typename Request, typename Response, typename Fix>
  void Call(Stub& stub,
            grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                         Response*),
            absl::string_view payload, absl::string_view name, Fix fix) {
    Request request;
    if (!Parse(payload, &request) || !fix(request)) return;
    Response response;
    Unary(stub, method, request, name, &response);
  }

  void Send(const Frame& frame) {
    v1::Summon::Stub& summon = *summon_stub_;
    v1::Trainer::Stub& trainer = *trainer_stub_;
    v1::Peer::Stub& peer = *peer_stub_;
    const auto keep = [](auto&) { return true; };
    const auto in_epoch = [](auto& r) { r.set_epoch(0); return true; };
    const auto session = [this](auto& request) {
      UseLastSession(request.mutable_session_id());
      return true;
    };
    switch (frame.rpc) {
      case Rpc::kCreateModel:
        return Call(summon, &v1::Summon::Stub::CreateModel, frame.payload,
                    "CreateModel", SmallEnough);
      case Rpc::kDescribeModel:
        return Call(summon, &v1::Summon::Stub::DescribeModel, frame.payload,
                    "DescribeModel", keep);
      case Rpc::kListModels:
        return Call(summon, &v1::Summon::Stub::ListModels, frame.payload,
                    "ListModels", keep);
      case Rpc::kLoadModel:
        return Call(summon, &v1::Summon::Stub::LoadModel, frame.payload,
                    "LoadModel", [](v1::LoadModelRequest& request) {
                      request.set_path(SandboxPath(request.path()));
                      return true;
                    });
      case Rpc::kSaveModel:
        return Call(summon, &v1::Summon::Stub::SaveModel, frame.payload,
                    "SaveModel", [](v1::SaveModelRequest& request) {
                      request.set_path(SandboxPath(request.path()));
                      return true;
                    });
      case Rpc::kModelChecksum:
        return Call(summon, &v1::Summon::Stub::ModelChecksum, frame.payload,
                    "ModelChecksum", keep);
      case Rpc::kDeleteModel:
        return Call(summon, &v1::Summon::Stub::DeleteModel, frame.payload,
                    "DeleteModel", keep);
      case Rpc::kOpenSession:
        return OpenSession(frame.payload);
      case Rpc::kGetSession:
        return Call(summon, &v1::Summon::Stub::GetSession, frame.payload,
                    "GetSession", session);
      case Rpc::kListSessions:
        return Call(summon, &v1::Summon::Stub::ListSessions, frame.payload,
                    "ListSessions", keep);
      case Rpc::kRenewSession:
        return Call(summon, &v1::Summon::Stub::RenewSession, frame.payload,
                    "RenewSession", session);
      case Rpc::kCloseSession:
        return Call(summon, &v1::Summon::Stub::CloseSession, frame.payload,
                    "CloseSession", session);
      case Rpc::kReadTensor:
        return ReadTensor(frame.payload);
      case Rpc::kTensorStats:
        return Call(summon, &v1::Summon::Stub::TensorStats, frame.payload,
                    "TensorStats", session);
      case Rpc::kMapSession:
        return Call(summon, &v1::Summon::Stub::MapSession, frame.payload,
                    "MapSession", session);
      case Rpc::kReportPhase:
        return Call(trainer, &v1::Trainer::Stub::ReportPhase, frame.payload,
                    "ReportPhase", [](v1::ReportPhaseRequest& request) {
                      if (request.has_deadline_ms()) {
                        request.set_deadline_ms(
                            std::min(request.deadline_ms(), kMaxPhaseWaitMs));
                      }
                      return true;
                    });
      case Rpc::kMapShards:
        return Call(trainer, &v1::Trainer::Stub::MapShards, frame.payload,
                    "MapShards", keep);
      case Rpc::kAttach:
        return Call(trainer, &v1::Trainer::Stub::Attach, frame.payload,
                    "Attach", keep);
      case Rpc::kTrainerHeartbeat:
        return Call(trainer, &v1::Trainer::Stub::Heartbeat, frame.payload,
                    "Heartbeat", keep);
      case Rpc::kDetach:
        return Call(trainer, &v1::Trainer::Stub::Detach, frame.payload,
                    "Detach", keep);
      case Rpc::kMarkInitialized:
        return Call(trainer, &v1::Trainer::Stub::MarkInitialized, frame.payload,
                    "MarkInitialized", keep);
      case Rpc::kAddWatch:
        return Call(summon, &v1::Summon::Stub::AddWatch, frame.payload,
                    "AddWatch", keep);
      case Rpc::kListWatches:
        return Call(summon, &v1::Summon::Stub::ListWatches, frame.payload,
                    "ListWatches", keep);
      case Rpc::kRemoveWatch:
        return Call(summon, &v1::Summon::Stub::RemoveWatch, frame.payload,
                    "RemoveWatch", keep);
      case Rpc::kShowWatch:
        return Call(summon, &v1::Summon::Stub::ShowWatch, frame.payload,
                    "ShowWatch", keep);
      case Rpc::kNodeWatchPartials:
        return Call(peer, &v1::Peer::Stub::NodeWatchPartials, frame.payload,
                    "NodeWatchPartials", in_epoch);
      case Rpc::kNodeWatchVersions:
        return Call(peer, &v1::Peer::Stub::NodeWatchVersions, frame.payload,
                    "NodeWatchVersions", in_epoch);
      case Rpc::kNodeWatchFetch:
        return NodeWatchFetch(frame.payload);
      case Rpc::kNodeWatchApply:
        return Call(peer, &v1::Peer::Stub::NodeWatchApply, frame.payload,
                    "NodeWatchApply", in_epoch);
      case Rpc::kGetClusterStatus:
        return Call(summon, &v1::Summon::Stub::GetClusterStatus, frame.payload,
                    "GetClusterStatus", keep);
      case Rpc::kWriteTensor:
        return;  // Streams are sent by WriteStream.
    }
  }

  void OpenSession(absl::string_view payload) {
    v1::OpenSessionRequest request;
    if (!Parse(payload, &request)) return;
    v1::Session session;
    Unary(*summon_stub_, &v1::Summon::Stub::OpenSession, request, "OpenSession",
          &session);
    if (!session.id().empty()) last_session_ = session.id();
  }

  void ReadTensor(absl::string_view payload) {
    v1::ReadTensorRequest request;
    if (!Parse(payload, &request)) return;
    UseLastSession(request.mutable_session_id());
    grpc::ClientContext context;
    auto reader = summon_stub_->ReadTensor(&context, request);
    v1::ReadTensorResponse chunk;
    for (int chunks = 0; reader->Read(&chunk);) {
      if (++chunks == kMaxReadChunks) context.TryCancel();
    }
    CheckStatus(reader->Finish(), "ReadTensor");
  }

  void NodeWatchFetch(absl::string_view payload) {
    v1::NodeWatchFetchRequest request;
    if (!Parse(payload, &request)) return;
    request.set_epoch(0);
    grpc::ClientContext context;
    auto reader = peer_stub_->NodeWatchFetch(&context, request);
    v1::WatchChunk chunk;
    while (reader->Read(&chunk)) {
    }
    CheckStatus(reader->Finish(), "NodeWatchFetch");
  }

  // Frames [begin, end) as the messages of one WriteTensor stream.
  void WriteStream(const std::vector<Frame>& frames, size_t begin, size_t end) {
    grpc::ClientContext context;
    v1::WriteTensorResponse response;
    auto writer = summon_stub_->WriteTensor(&context, &response);
    for (size_t i = begin; i < end; ++i) {
      v1::WriteTensorRequest message;
      if (!Parse(frames[i].payload, &message)) continue;
      if (message.has_header()) {
        UseLastSession(message.mutable_header()->mutable_session_id());
      }
      if (!writer->Write(message)) break;  // The daemon already answered.
    }
    writer->WritesDone();
    CheckStatus(writer->Finish(), "WriteTensor");
  }

  // Aborts every session and deletes every model; whatever survives that
  // leaked.
  void Reset() {
    last_session_.clear();
    FreshWatches();
    for (const summon::server::SessionInfo& session :
         sessions_->List(/*model=*/"", kPrincipal, /*all=*/false)) {
      const absl::Status status =
          sessions_
              ->Close(session.id, /*abort=*/true, /*force=*/false, kPrincipal)
              .status();
      if (!status.ok()) {
        Fail(absl::StrCat("aborting session ", session.id, ": ",
                          status.ToString()));
      }
    }
    if (sessions_->OpenSessionCount() != 0 || sessions_->MemoryInUse() != 0) {
      Fail(absl::StrCat("after aborting every session ",
                        sessions_->OpenSessionCount(), " remain holding ",
                        sessions_->MemoryInUse(), " bytes"));
    }
    for (const std::shared_ptr<summon::server::ModelEntry>& model :
         registry_->List()) {
      trainers_->Revoke(model->name, "fuzz input done");
      trainers_->Forget(model->name);
      if (absl::Status status = registry_->Remove(model->name); !status.ok()) {
        Fail(absl::StrCat("deleting model ", model->name, ": ",
                          status.ToString()));
      }
    }
    const std::vector<std::string> segments =
        summon::server::ShardStore::ListSegments(instance_);
    if (!segments.empty()) {
      Fail(absl::StrCat("every model deleted, yet ", segments.size(),
                        " shared-memory segments remain, e.g. ", segments[0]));
    }
    for (const fs::directory_entry& entry :
         fs::directory_iterator(checkpoints_)) {
      fs::remove_all(entry.path());
    }
  }

  const std::string instance_;
  const fs::path checkpoints_;
  std::unique_ptr<summon::server::ModelRegistry> registry_;
  std::unique_ptr<summon::server::SessionManager> sessions_;
  std::unique_ptr<summon::server::TrainerLeases> trainers_;
  // Asks sessions_ about its grants: goes before them.
  std::unique_ptr<summon::server::LocalFdBroker> fd_broker_;
  // Insecure-local: every caller has every role, as on a loopback summond.
  summon::server::auth::Authorizer authorizer_{
      summon::server::auth::SecuritySpec(), nullptr, nullptr};
  std::unique_ptr<summon::server::SummonServiceImpl> summon_;
  std::unique_ptr<summon::server::TrainerServiceImpl> trainer_;
  summon::server::LocalKvStore kv_store_;
  std::unique_ptr<summon::server::Membership> membership_;
  std::unique_ptr<summon::server::NodeRuntime> runtime_;
  std::unique_ptr<summon::server::PeerServiceImpl> peer_;
  std::unique_ptr<summon::server::WatchStore> watches_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Summon::Stub> summon_stub_;
  std::unique_ptr<v1::Trainer::Stub> trainer_stub_;
  std::unique_ptr<v1::Peer::Stub> peer_stub_;
  std::string last_session_;
};

}  // namespace

std::unique_ptr<FuzzDaemon> StartFuzzDaemon() {
  return std::make_unique<Daemon>();
}

}  // namespace summon::fuzz
