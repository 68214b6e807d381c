#include "tests/integration/summond_fixture.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/seeded_init.h"
#include "server/gpu/cuda_shard_memory.h"
#include "server/model/model_registry.h"
#include "server/store/shard_store.h"
#include "server/testing/fake_device_memory.h"

namespace summon::tests {
namespace {

uint64_t Fnv1a(const std::vector<float>& values) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

const pb::Parameter* FindParameter(const pb::Model& model,
                                   const std::string& fqn,
                                   const pb::Unit** unit_out) {
  for (const pb::Unit& unit : model.units()) {
    for (const pb::Parameter& param : unit.params()) {
      if (param.info().fqn() == fqn) {
        *unit_out = &unit;
        return &param;
      }
    }
  }
  return nullptr;
}

}  // namespace

std::vector<float> Seeded(const std::string& fqn, int64_t numel,
                          uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(numel));
  const absl::Status status = core::FillSeeded(fqn, seed, core::DType::kFloat32,
                                               0, numel, values.data());
  EXPECT_TRUE(status.ok()) << status;
  return values;
}

TensorValues SeededBlocks(uint64_t seed) {
  TensorValues values;
  for (const auto& [fqn, numel] : kBlocksParams) {
    values[fqn] = Seeded(fqn, numel, seed);
  }
  return values;
}

std::vector<float> Scaled(std::vector<float> values, float factor) {
  for (float& value : values) value *= factor;
  return values;
}

ChecksumMap ParamChecksums(const pb::ModelChecksumResponse& response) {
  ChecksumMap sums;
  for (const pb::ShardChecksum& shard : response.shards()) {
    sums[{shard.rank(), shard.unit()}] = shard.params();
  }
  return sums;
}

ChecksumMap GradChecksums(const pb::ModelChecksumResponse& response) {
  ChecksumMap sums;
  for (const pb::ShardChecksum& shard : response.shards()) {
    if (shard.has_grads()) sums[{shard.rank(), shard.unit()}] = shard.grads();
  }
  return sums;
}

ChecksumMap ExpectedChecksums(const pb::Model& model,
                              const TensorValues& values,
                              const std::vector<int>& ranks) {
  std::vector<int> chosen = ranks;
  if (chosen.empty()) {
    for (int rank = 0; rank < model.world_size(); ++rank) {
      chosen.push_back(rank);
    }
  }
  ChecksumMap sums;
  for (const pb::Unit& unit : model.units()) {
    EXPECT_EQ(unit.dtype(), pb::DTYPE_FLOAT32) << unit.fqn();
    const int64_t chunk = unit.chunk_numel();
    for (int rank : chosen) {
      const int64_t first = (rank % model.group_size()) * chunk;
      std::vector<float> shard(static_cast<size_t>(chunk), 0.0f);
      for (const pb::Parameter& param : unit.params()) {
        auto it = values.find(param.info().fqn());
        if (it == values.end()) {
          ADD_FAILURE() << "no values for " << param.info().fqn();
          continue;
        }
        for (int64_t i = 0; i < chunk; ++i) {
          const int64_t element = first + i - param.flat_offset();
          if (element >= 0 && element < param.info().numel()) {
            shard[static_cast<size_t>(i)] = it->second[element];
          }
        }
      }
      sums[{rank, unit.fqn()}] = Fnv1a(shard);
    }
  }
  return sums;
}

int OwnerOf(const pb::Model& model, const std::string& fqn, int64_t index) {
  const pb::Unit* unit = nullptr;
  const pb::Parameter* param = FindParameter(model, fqn, &unit);
  if (param == nullptr) {
    ADD_FAILURE() << "no parameter " << fqn;
    return -1;
  }
  return static_cast<int>((param->flat_offset() + index) / unit->chunk_numel());
}

int64_t SessionBufferBytes(const std::vector<int64_t>& numels) {
  int64_t bytes = 0;
  for (int64_t numel : numels) bytes = (bytes + 63) / 64 * 64 + numel * 4;
  return bytes;
}

pb::SessionOptions ModuleScope(const std::string& fqn, bool recurse) {
  pb::SessionOptions options;
  options.mutable_module()->set_fqn(fqn);
  options.mutable_module()->set_recurse(recurse);
  return options;
}

pb::SessionOptions ParamScope(const std::vector<std::string>& fqns) {
  pb::SessionOptions options;
  for (const std::string& fqn : fqns) options.mutable_params()->add_fqns(fqn);
  return options;
}

pb::SessionOptions ReadOnly(pb::SessionOptions options) {
  options.set_writeback(false);
  return options;
}

void SummondTest::StartServer(int local_ranks, int64_t memory_budget_bytes,
                              absl::Duration reaper_interval) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/summond-XXXXXX";
  ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
  data_dir_ = pattern;
  spec_ = SummonServer::Spec{};
  spec_.local_ranks = local_ranks;
  spec_.data_dir = data_dir_;
  spec_.memory_budget_bytes = memory_budget_bytes;
  spec_.reaper_interval = reaper_interval;
  spec_.admins = {"admin"};
  ASSERT_NO_FATAL_FAILURE(PlaceShards());
  spec_.slice_devices = slice_devices_;
  absl::StatusOr<std::unique_ptr<SummonServer>> server =
      SummonServer::Start(spec_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  Connect();
}

void SummondTest::PlaceShards() {
  const char* device = std::getenv("SUMMON_TEST_DEVICE");
  const std::string placement = device == nullptr ? "" : device;
  if (placement.empty() || placement == "cpu") return;
  if (placement == "fake") {
    spec_.device = std::make_shared<server::FakeDeviceMemoryProvider>();
    return;
  }
  ASSERT_EQ(placement, "cuda") << "SUMMON_TEST_DEVICE is cpu, fake or cuda";
  absl::StatusOr<std::unique_ptr<server::gpu::CudaShardMemoryProvider>>
      provider = server::gpu::CudaShardMemoryProvider::Create();
  if (!provider.ok()) {
    GTEST_SKIP() << "SUMMON_TEST_DEVICE=cuda needs a CUDA device: "
                 << provider.status();
  }
  spec_.device = *std::move(provider);
}

void SummondTest::RestartServer() {
  summon_.reset();
  trainer_.reset();
  server_->Shutdown();
  server_.reset();
  absl::StatusOr<std::unique_ptr<SummonServer>> server =
      SummonServer::Start(spec_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  Connect();
}

void SummondTest::Connect() {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  summon_ = pb::Summon::NewStub(channel);
  trainer_ = pb::Trainer::NewStub(channel);
}

void SummondTest::TearDown() {
  summon_.reset();
  trainer_.reset();
  if (server_ != nullptr) server_->Shutdown();
  server_.reset();
  if (data_dir_.empty()) return;
  const std::string instance = server::InstanceForDataDir(data_dir_);
  for (const std::string& segment :
       server::ShardStore::ListSegments(instance)) {
    shm_unlink(segment.c_str());
  }
  EXPECT_TRUE(server::ShardStore::ListSegments(instance).empty());
  std::error_code error;
  std::filesystem::remove_all(data_dir_, error);
  data_dir_.clear();
}

pb::Model SummondTest::CreateSeeded(
    const std::string& name, pb::ShardingStrategy strategy,
    const std::string& layout, std::optional<std::vector<int>> grad_ranks) {
  pb::CreateModelRequest request;
  request.set_name(name);
  request.set_layout_json(layout);
  request.set_strategy(strategy);
  request.mutable_init()->mutable_seeded()->set_seed(kSeed);
  if (grad_ranks.has_value()) {
    pb::GradientShards* grads = request.mutable_grads();
    for (int rank : *grad_ranks) grads->add_ranks(rank);
    grads->mutable_init()->mutable_seeded()->set_seed(kGradSeed);
  }
  pb::Model model;
  grpc::ClientContext context;
  const grpc::Status status = summon_->CreateModel(&context, request, &model);
  EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
  return model;
}

pb::Model SummondTest::Describe(const std::string& model) {
  pb::DescribeModelRequest request;
  request.set_model(model);
  pb::Model response;
  grpc::ClientContext context;
  const grpc::Status status =
      summon_->DescribeModel(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

pb::ModelChecksumResponse SummondTest::Checksum(const std::string& model) {
  pb::ModelChecksumRequest request;
  request.set_model(model);
  pb::ModelChecksumResponse response;
  grpc::ClientContext context;
  const grpc::Status status =
      summon_->ModelChecksum(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

grpc::Status SummondTest::TryOpen(const std::string& model,
                                  const pb::SessionOptions& options,
                                  pb::Session* session) {
  pb::OpenSessionRequest request;
  request.set_model(model);
  *request.mutable_options() = options;
  grpc::ClientContext context;
  return summon_->OpenSession(&context, request, session);
}

pb::Session SummondTest::Open(const std::string& model,
                              const pb::SessionOptions& options) {
  pb::Session session;
  const grpc::Status status = TryOpen(model, options, &session);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return session;
}

grpc::Status SummondTest::TryClose(const std::string& id, bool abort,
                                   bool force,
                                   pb::CloseSessionResponse* response) {
  pb::CloseSessionRequest request;
  request.set_session_id(id);
  request.set_abort(abort);
  request.set_force(force);
  grpc::ClientContext context;
  return summon_->CloseSession(&context, request, response);
}

pb::CloseSessionResponse SummondTest::Close(const std::string& id) {
  pb::CloseSessionResponse response;
  const grpc::Status status = TryClose(id, false, false, &response);
  EXPECT_TRUE(status.ok()) << id << ": " << status.error_message();
  return response;
}

grpc::Status SummondTest::ReadRaw(const pb::ReadTensorRequest& request,
                                  std::string* data, pb::TensorInfo* info) {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<pb::ReadTensorResponse>> reader =
      summon_->ReadTensor(&context, request);
  pb::ReadTensorResponse chunk;
  bool first = true;
  data->clear();
  while (reader->Read(&chunk)) {
    if (first && info != nullptr) *info = chunk.info();
    first = false;
    data->append(chunk.data());
  }
  return reader->Finish();
}

std::vector<float> SummondTest::Read(const std::string& session,
                                     const std::string& fqn, bool grad) {
  pb::ReadTensorRequest request;
  request.set_session_id(session);
  request.set_fqn(fqn);
  request.set_grad(grad);
  request.set_dtype(pb::DTYPE_FLOAT32);
  std::string data;
  const grpc::Status status = ReadRaw(request, &data);
  EXPECT_TRUE(status.ok()) << fqn << ": " << status.error_message();
  std::vector<float> values(data.size() / sizeof(float));
  std::memcpy(values.data(), data.data(), values.size() * sizeof(float));
  return values;
}

grpc::Status SummondTest::Write(const pb::WriteTensorHeader& header,
                                const std::vector<std::string>& data) {
  grpc::ClientContext context;
  pb::WriteTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<pb::WriteTensorRequest>> writer =
      summon_->WriteTensor(&context, &response);
  pb::WriteTensorRequest message;
  *message.mutable_header() = header;
  writer->Write(message);
  for (const std::string& bytes : data) {
    message.set_data(bytes);
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

grpc::Status SummondTest::WriteFloats(const std::string& session,
                                      const std::string& fqn,
                                      const std::vector<float>& values,
                                      bool grad, int64_t offset) {
  pb::WriteTensorHeader header;
  header.set_session_id(session);
  header.set_fqn(fqn);
  header.set_grad(grad);
  header.set_dtype(pb::DTYPE_FLOAT32);
  header.set_element_offset(offset);
  header.set_element_count(static_cast<int64_t>(values.size()));
  // Two messages of whole elements, so chunking is exercised.
  const std::string bytes = FloatBytes(values);
  const size_t half = values.size() / 2 * sizeof(float);
  return Write(header, {bytes.substr(0, half), bytes.substr(half)});
}

grpc::Status SummondTest::ReportPhase(const std::string& model, int rank,
                                      pb::TrainingPhase phase,
                                      std::optional<uint32_t> deadline_ms,
                                      pb::ReportPhaseResponse* response) {
  pb::ReportPhaseRequest request;
  request.set_model(model);
  request.set_rank(rank);
  request.set_phase(phase);
  if (deadline_ms.has_value()) request.set_deadline_ms(*deadline_ms);
  pb::ReportPhaseResponse ignored;
  grpc::ClientContext context;
  return trainer_->ReportPhase(&context, request,
                               response != nullptr ? response : &ignored);
}

grpc::Status SummondTest::WalkPhases(
    const std::string& model, int rank,
    const std::vector<pb::TrainingPhase>& phases, std::optional<int64_t> step,
    const std::string& lease_id) {
  for (pb::TrainingPhase phase : phases) {
    pb::ReportPhaseRequest request;
    request.set_model(model);
    request.set_rank(rank);
    request.set_phase(phase);
    if (step.has_value()) request.set_step(*step);
    request.set_lease_id(lease_id);
    pb::ReportPhaseResponse response;
    grpc::ClientContext context;
    grpc::Status status = trainer_->ReportPhase(&context, request, &response);
    if (!status.ok()) return status;
  }
  return grpc::Status::OK;
}

const std::vector<pb::TrainingPhase>& SummondTest::FullStep() {
  static const auto* const kStep = new std::vector<pb::TrainingPhase>{
      pb::TRAINING_PHASE_FORWARD, pb::TRAINING_PHASE_BETWEEN,
      pb::TRAINING_PHASE_BACKWARD, pb::TRAINING_PHASE_OPTIMIZER,
      pb::TRAINING_PHASE_IDLE};
  return *kStep;
}

pb::MapShardsResponse SummondTest::MapShards(const std::string& model,
                                             int rank) {
  pb::MapShardsRequest request;
  request.set_model(model);
  request.set_rank(rank);
  pb::MapShardsResponse response;
  grpc::ClientContext context;
  const grpc::Status status = trainer_->MapShards(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

}  // namespace summon::tests
