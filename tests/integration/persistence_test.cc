// Shards outliving sessions and daemons: summond restarted on the same data
// directory re-attaches every shard with nothing lost; SaveModel / LoadModel
// round trips through safetensors; Trainer.MapShards hands out shared memory
// that holds the shards in place (read and written by the test as a trainer
// would).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/seeded_init.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

// A shared-memory segment mapped read-write into the test process.
class MappedSegment {
 public:
  explicit MappedSegment(const std::string& name, uint64_t bytes)
      : bytes_(bytes) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0) << name << ": " << std::strerror(errno);
    if (fd < 0) return;
    struct stat info;
    EXPECT_EQ(fstat(fd, &info), 0);
    EXPECT_EQ(static_cast<uint64_t>(info.st_size), bytes) << name;
    void* base =
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(base, MAP_FAILED) << std::strerror(errno);
    if (base != MAP_FAILED) base_ = static_cast<uint8_t*>(base);
  }
  ~MappedSegment() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  float* Floats(uint64_t byte_offset) const {
    return reinterpret_cast<float*>(base_ + byte_offset);
  }
  bool ok() const { return base_ != nullptr; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_;
};

class PersistenceTest : public SummondTest {
 protected:
  grpc::Status Save(const std::string& model, const std::string& path,
                    uint64_t max_file_bytes, pb::SaveModelResponse* response) {
    pb::SaveModelRequest request;
    request.set_model(model);
    request.set_path(path);
    request.set_max_file_bytes(max_file_bytes);
    grpc::ClientContext context;
    return summon_->SaveModel(&context, request, response);
  }

  grpc::Status Load(const pb::LoadModelRequest& request,
                    pb::LoadModelResponse* response) {
    grpc::ClientContext context;
    return summon_->LoadModel(&context, request, response);
  }

  // Every primary parameter of `model` read through a new read-only session.
  TensorValues ReadAll(const std::string& model) {
    const pb::Session session = Open(model, ReadOnly());
    TensorValues values;
    for (const pb::TensorInfo& tensor : session.params()) {
      values[tensor.fqn()] = Read(session.id(), tensor.fqn());
    }
    Close(session.id());
    return values;
  }
};

TEST_F(PersistenceTest, RestartedDaemonReattachesShardsWithNothingLost) {
  StartServer(4);
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kBlocksLayout,
               std::vector<int>{1});
  CreateSeeded("n", pb::SHARDING_STRATEGY_NO_SHARD);
  TensorValues expected = SeededBlocks();
  expected["layers.0.attn.w"] = Scaled(expected["layers.0.attn.w"], 0.25f);
  const pb::Session writer = Open("m", ModuleScope("layers.0"));
  ASSERT_TRUE(
      WriteFloats(writer.id(), "layers.0.attn.w", expected["layers.0.attn.w"])
          .ok());
  Close(writer.id());
  ASSERT_TRUE(WalkPhases("m", 0, FullStep()).ok());
  const pb::Model before = Describe("m");
  std::vector<uint64_t> generations;
  for (const pb::Unit& unit : before.units()) {
    generations.push_back(unit.generation());
  }
  EXPECT_EQ(generations, (std::vector<uint64_t>{1, 2, 1}));
  const std::string checksums_m = Checksum("m").DebugString();
  const std::string checksums_n = Checksum("n").DebugString();
  // A session open at the restart: its edits were never written back.
  const pb::Session open = Open("m", ModuleScope("layers.1"));
  ASSERT_TRUE(
      WriteFloats(open.id(), "layers.1.w", std::vector<float>(35, 8)).ok());

  RestartServer();

  pb::ListModelsResponse models;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(summon_->ListModels(&context, {}, &models).ok());
  }
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(0).name(), "m");
  EXPECT_EQ(models.models(1).name(), "n");
  EXPECT_EQ(models.models(1).strategy(), pb::SHARDING_STRATEGY_NO_SHARD);
  const pb::Model after = Describe("m");
  for (int u = 0; u < after.units_size(); ++u) {
    EXPECT_EQ(after.units(u).generation(), generations[u]) << u;
  }
  for (const pb::RankState& rank : after.ranks()) {
    EXPECT_EQ(rank.has_grads(), rank.rank() == 1) << rank.rank();
  }
  EXPECT_EQ(Checksum("m").DebugString(), checksums_m);
  EXPECT_EQ(Checksum("n").DebugString(), checksums_n);
  EXPECT_EQ(ReadAll("m"), expected);
  EXPECT_EQ(ReadAll("n"), SeededBlocks());

  pb::Session gone;
  {
    pb::GetSessionRequest request;
    request.set_session_id(open.id());
    grpc::ClientContext context;
    EXPECT_CODE(summon_->GetSession(&context, request, &gone), NOT_FOUND);
  }
  // The restarted daemon holds no stale lock and writes back as before.
  const pb::Session again = Open("m", ModuleScope("layers.1"));
  ASSERT_TRUE(
      WriteFloats(again.id(), "layers.1.w", std::vector<float>(35, 2)).ok());
  EXPECT_TRUE(Close(again.id()).written_back());
  expected["layers.1.w"] = std::vector<float>(35, 2);
  EXPECT_EQ(ParamChecksums(Checksum("m")), ExpectedChecksums(after, expected));
}

TEST_F(PersistenceTest, DeletedModelLosesItsShardsAndStaysGoneAfterRestart) {
  StartServer(4);
  CreateSeeded("m");
  CreateSeeded("kept");
  const std::string segment = MapShards("m", 0).segment_name();
  pb::DeleteModelRequest request;
  request.set_model("m");
  pb::DeleteModelResponse response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(summon_->DeleteModel(&context, request, &response).ok());
  }
  const int fd = shm_open(segment.c_str(), O_RDONLY, 0);
  EXPECT_EQ(fd, -1) << segment << " still exists";
  if (fd >= 0) close(fd);
  RestartServer();
  pb::ListModelsResponse models;
  grpc::ClientContext context;
  ASSERT_TRUE(summon_->ListModels(&context, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).name(), "kept");
  EXPECT_EQ(ReadAll("kept"), SeededBlocks());
}

TEST_F(PersistenceTest, SavedCheckpointLoadsAsASecondModelWithEqualTensors) {
  StartServer(4);
  CreateSeeded("m");
  TensorValues expected = SeededBlocks();
  expected["layers.0.attn.w"] = Scaled(expected["layers.0.attn.w"], -3);
  const pb::Session writer = Open("m", ModuleScope("layers.0"));
  ASSERT_TRUE(
      WriteFloats(writer.id(), "layers.0.attn.w", expected["layers.0.attn.w"])
          .ok());
  Close(writer.id());

  pb::SaveModelResponse saved;
  const grpc::Status save = Save("m", "m.safetensors", 0, &saved);
  ASSERT_TRUE(save.ok()) << save.error_message();
  ASSERT_EQ(saved.files_size(), 1);
  // Relative to the data directory.
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(data_dir_) / "checkpoints" /
                                      "m.safetensors"));
  EXPECT_GT(saved.bytes_written(), kBlocksNumel * 4);

  pb::LoadModelRequest load;
  load.set_model("copy");
  load.set_path("m.safetensors");
  load.mutable_create()->add_unit_prefixes("layers.*");
  pb::LoadModelResponse loaded;
  const grpc::Status status = Load(load, &loaded);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loaded.bytes_read(), kBlocksNumel * 4);
  std::vector<std::string> units;
  for (const pb::Unit& unit : loaded.model().units()) {
    units.push_back(unit.fqn());
  }
  EXPECT_EQ(units, (std::vector<std::string>{"", "layers.0", "layers.1"}));
  EXPECT_EQ(loaded.model().strategy(), pb::SHARDING_STRATEGY_FULL_SHARD);
  EXPECT_EQ(ReadAll("copy"), expected);
  EXPECT_EQ(ReadAll("m"), expected);
  // Creating it twice is refused.
  EXPECT_CODE(Load(load, &loaded), ALREADY_EXISTS);
}

TEST_F(PersistenceTest, DirectoryCheckpointLoadsIntoAnExistingModel) {
  StartServer(4);
  CreateSeeded("m", pb::SHARDING_STRATEGY_NO_SHARD);
  pb::SaveModelResponse saved;
  ASSERT_TRUE(Save("m", "ckpt-dir", 200, &saved).ok());
  EXPECT_GT(saved.files_size(), 2);  // Several shards plus the index.
  EXPECT_TRUE(
      std::filesystem::exists(std::filesystem::path(data_dir_) / "checkpoints" / "ckpt-dir" /
                              "model.safetensors.index.json"));

  pb::CreateModelRequest create;
  create.set_name("z");
  create.set_layout_json(kBlocksLayout);
  pb::Model zeros;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(summon_->CreateModel(&context, create, &zeros).ok());
  }
  EXPECT_EQ(ReadAll("z")["layers.1.w"], std::vector<float>(35, 0.0f));
  const pb::Session blocker = Open("z", ReadOnly());
  pb::LoadModelRequest load;
  load.set_model("z");
  load.set_path("ckpt-dir");
  pb::LoadModelResponse loaded;
  EXPECT_CODE(Load(load, &loaded), FAILED_PRECONDITION);
  Close(blocker.id());
  ASSERT_TRUE(Load(load, &loaded).ok());
  EXPECT_EQ(ReadAll("z"), SeededBlocks());
  for (const pb::Unit& unit : loaded.model().units()) {
    EXPECT_EQ(unit.generation(), 1u) << unit.fqn();
  }
  EXPECT_EQ(ParamChecksums(Checksum("z")),
            ExpectedChecksums(Describe("z"), SeededBlocks()));
}

TEST_F(PersistenceTest, MappedShardsHoldTheSeededSlicesAndTakeTrainerWrites) {
  StartServer(4);
  const pb::Model model = CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD,
                                       kBlocksLayout, std::vector<int>{2});
  std::map<std::string, int64_t> covered;
  std::vector<float> trained = Seeded("layers.1.w", 35);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const pb::MapShardsResponse map = MapShards("m", rank);
    EXPECT_EQ(map.world_size(), 4);
    EXPECT_EQ(map.segment_name().rfind("/summon-", 0), 0u)
        << map.segment_name();
    EXPECT_EQ(map.grads_segment_name().empty(), rank != 2);
    MappedSegment params(map.segment_name(), map.segment_bytes());
    ASSERT_TRUE(params.ok());
    std::unique_ptr<MappedSegment> grads;
    if (rank == 2) {
      grads = std::make_unique<MappedSegment>(map.grads_segment_name(),
                                              map.grads_segment_bytes());
      ASSERT_TRUE(grads->ok());
    }
    ASSERT_EQ(map.units_size(), 3);
    for (int u = 0; u < map.units_size(); ++u) {
      const pb::UnitShard& unit = map.units(u);
      EXPECT_EQ(unit.unit(), model.units(u).fqn());
      EXPECT_EQ(unit.position(), rank);
      EXPECT_EQ(unit.group_size(), 4);
      EXPECT_EQ(unit.chunk_numel(), model.units(u).chunk_numel());
      EXPECT_EQ(unit.has_grads_offset(), rank == 2);
      for (const pb::ParamShard& shard : unit.params()) {
        const std::string& fqn = shard.info().fqn();
        covered[fqn] += shard.numel();
        std::vector<float> want(shard.numel());
        ASSERT_TRUE(core::FillSeeded(fqn, kSeed, core::DType::kFloat32,
                                     shard.element_offset(), shard.numel(),
                                     want.data())
                        .ok());
        float* data =
            params.Floats(unit.params_offset()) + shard.offset_in_shard();
        EXPECT_EQ(std::vector<float>(data, data + shard.numel()), want) << fqn;
        if (grads != nullptr) {
          ASSERT_TRUE(core::FillSeeded(
                          fqn + ".grad", kGradSeed, core::DType::kFloat32,
                          shard.element_offset(), shard.numel(), want.data())
                          .ok());
          const float* grad =
              grads->Floats(unit.grads_offset()) + shard.offset_in_shard();
          EXPECT_EQ(std::vector<float>(grad, grad + shard.numel()), want)
              << fqn << ".grad";
        }
        // The trainer's step: this rank negates its slice of layers.1.w.
        if (fqn == "layers.1.w") {
          for (int64_t i = 0; i < shard.numel(); ++i) {
            data[i] = -data[i];
            trained[shard.element_offset() + i] *= -1;
          }
        }
      }
    }
  }
  // Every element of every parameter lives on exactly one rank.
  for (const auto& [fqn, numel] : kBlocksParams) {
    EXPECT_EQ(covered[fqn], numel) << fqn;
  }
  const pb::Session session = Open("m", ReadOnly());
  EXPECT_EQ(Read(session.id(), "layers.1.w"), trained);
  EXPECT_EQ(Read(session.id(), "layers.0.mlp.w"), Seeded("layers.0.mlp.w", 15));
}

// A parameter-list session writes back only its parameters' byte ranges: a
// trainer's change to another parameter of the same unit survives.
TEST_F(PersistenceTest, ParameterListWritebackLeavesTheRestOfItsUnitAlone) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session session = Open("m", ParamScope({"embed.w"}));
  // norm.w shares the root unit with embed.w and lives on rank 3.
  const pb::MapShardsResponse map = MapShards("m", 3);
  std::vector<float> norm = Seeded("norm.w", 10);
  {
    MappedSegment params(map.segment_name(), map.segment_bytes());
    ASSERT_TRUE(params.ok());
    bool found = false;
    for (const pb::ParamShard& shard : map.units(0).params()) {
      if (shard.info().fqn() != "norm.w") continue;
      found = true;
      ASSERT_EQ(shard.numel(), 10);
      float* data =
          params.Floats(map.units(0).params_offset()) + shard.offset_in_shard();
      for (int i = 0; i < 10; ++i) data[i] = norm[i] = 100.0f + i;
    }
    ASSERT_TRUE(found);
  }
  const std::vector<float> embed = Scaled(Seeded("embed.w", 40), 2);
  ASSERT_TRUE(WriteFloats(session.id(), "embed.w", embed).ok());
  EXPECT_TRUE(Close(session.id()).written_back());
  const pb::Session check = Open("m", ReadOnly());
  EXPECT_EQ(Read(check.id(), "embed.w"), embed);
  EXPECT_EQ(Read(check.id(), "norm.w"), norm);
}

}  // namespace
}  // namespace summon::tests
