// The trainer contract over gRPC: every shard write through the interlock
// (R15), the phase machine (R16), external-write counters and WatchUnits
// (R18), init external with a trainer filling its shards through MapShards,
// and models whose segments a careless client unlinked.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kRanks = 2;

class TrainerContractTest : public SummondTest {
 protected:
  grpc::Status Load(const std::string& model, const std::string& path,
                    pb::LoadModelResponse* response = nullptr,
                    const pb::LoadModelRequest& base = {}) {
    pb::LoadModelRequest request = base;
    request.set_model(model);
    request.set_path(path);
    pb::LoadModelResponse ignored;
    grpc::ClientContext context;
    return summon_->LoadModel(&context, request,
                              response != nullptr ? response : &ignored);
  }
  void Save(const std::string& model, const std::string& path) {
    pb::SaveModelRequest request;
    request.set_model(model);
    request.set_path(path);
    pb::SaveModelResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(summon_->SaveModel(&context, request, &response).ok());
  }
  grpc::Status Delete(const std::string& model) {
    pb::DeleteModelRequest request;
    request.set_model(model);
    pb::DeleteModelResponse response;
    grpc::ClientContext context;
    return summon_->DeleteModel(&context, request, &response);
  }
  pb::MapShardsResponse Map(const std::string& model, int rank) {
    pb::MapShardsRequest request;
    request.set_model(model);
    request.set_rank(rank);
    pb::MapShardsResponse response;
    grpc::ClientContext context;
    grpc::Status status = trainer_->MapShards(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
  pb::ModelSummary Summary(const std::string& model) {
    pb::ListModelsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(summon_->ListModels(&context, {}, &response).ok());
    for (const pb::ModelSummary& summary : response.models()) {
      if (summary.name() == model) return summary;
    }
    ADD_FAILURE() << "model " << model << " not listed";
    return {};
  }
  // generation and external_writes of every unit, as "unit:gen/ext".
  static std::vector<std::string> Counters(const pb::Model& model) {
    std::vector<std::string> counters;
    for (const pb::Unit& unit : model.units()) {
      counters.push_back(absl::StrCat(unit.fqn(), ":", unit.generation(), "/",
                                      unit.external_writes()));
    }
    return counters;
  }
};

TEST_F(TrainerContractTest, R15_LoadAndDeleteRefusedInForwardShardsIntact) {
  StartServer(kRanks);
  CreateSeeded("m");
  Save("m", "m.safetensors");
  ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_FORWARD).ok());
  const ChecksumMap before = ParamChecksums(Checksum("m"));
  grpc::Status load = Load("m", "m.safetensors");
  EXPECT_CODE(load, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(load.error_message(),
                                "load of a checkpoint of model 'm': rank 1 is "
                                "in FORWARD"))
      << load.error_message();
  EXPECT_CODE(Delete("m"), FAILED_PRECONDITION);
  EXPECT_EQ(ParamChecksums(Checksum("m")), before);
  // Back to IDLE the load runs: every unit's generation and external-write
  // counter move once.
  ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_IDLE).ok());
  ASSERT_TRUE(Load("m", "m.safetensors").ok());
  EXPECT_EQ(Counters(Describe("m")),
            (std::vector<std::string>{":1/1", "layers.0:1/1", "layers.1:1/1"}));
  EXPECT_EQ(ParamChecksums(Checksum("m")), before);  // The same values.
  ASSERT_TRUE(Delete("m").ok());
}

TEST_F(TrainerContractTest, R16_EveryIllegalPhaseEdgeIsRefusedOverGrpc) {
  StartServer(kRanks);
  CreateSeeded("m");
  using P = pb::TrainingPhase;
  const std::vector<P> phases = {
      pb::TRAINING_PHASE_IDLE, pb::TRAINING_PHASE_FORWARD,
      pb::TRAINING_PHASE_BETWEEN, pb::TRAINING_PHASE_BACKWARD,
      pb::TRAINING_PHASE_OPTIMIZER};
  // From IDLE, the legal path to each phase, and back to IDLE from it.
  const std::vector<std::vector<P>> reach = {
      {},
      {phases[1]},
      {phases[1], phases[2]},
      {phases[1], phases[2], phases[3]},
      {phases[1], phases[2], phases[3], phases[4]}};
  const std::vector<std::vector<P>> home = {
      {}, {phases[0]}, {phases[3], phases[0]}, {phases[0]}, {phases[0]}};
  int refused = 0;
  for (size_t from = 0; from < phases.size(); ++from) {
    for (size_t to = 0; to < phases.size(); ++to) {
      ASSERT_TRUE(WalkPhases("m", 0, reach[from]).ok());
      grpc::Status status = ReportPhase("m", 0, phases[to]);
      if (status.ok()) {
        // Legal: go home from where the move landed.
        ASSERT_TRUE(WalkPhases("m", 0, home[to]).ok());
        continue;
      }
      ++refused;
      EXPECT_CODE(status, FAILED_PRECONDITION);
      const std::string name_from = pb::TrainingPhase_Name(phases[from]);
      const std::string name_to = pb::TrainingPhase_Name(phases[to]);
      EXPECT_TRUE(absl::StrContains(status.error_message(),
                                    absl::StrCat("from ", name_from.substr(15),
                                                 " to ", name_to.substr(15))))
          << status.error_message();
      ASSERT_TRUE(WalkPhases("m", 0, home[from]).ok());
    }
  }
  EXPECT_EQ(refused, 17);
}

TEST_F(TrainerContractTest,
       R18_ExternalWritesMoveOnWritebackNotOnStepsAndAreWatched) {
  StartServer(kRanks);
  CreateSeeded("m");
  grpc::ClientContext watch_context;
  pb::WatchUnitsRequest watch;
  watch.set_model("m");
  auto stream = trainer_->WatchUnits(&watch_context, watch);
  pb::WatchUnitsResponse seen;
  ASSERT_TRUE(stream->Read(&seen));
  ASSERT_EQ(seen.units_size(), 3);
  for (const pb::UnitGeneration& unit : seen.units()) {
    EXPECT_EQ(unit.external_writes(), 0u);
  }
  // The trainer's own step: the generation moves, external_writes does not
  // (and the watch, external writes only, stays quiet).
  ASSERT_TRUE(WalkPhases("m", 0, FullStep(), 1).ok());
  ASSERT_TRUE(WalkPhases("m", 1, FullStep(), 1).ok());
  EXPECT_EQ(Counters(Describe("m")),
            (std::vector<std::string>{":1/0", "layers.0:1/0", "layers.1:1/0"}));
  // An inspector's writeback of layers.1.
  const pb::Session writer = Open("m", ModuleScope("layers.1"));
  ASSERT_TRUE(WriteFloats(writer.id(), "layers.1.w",
                          Scaled(Seeded("layers.1.w", 35), 2))
                  .ok());
  const pb::CloseSessionResponse closed = Close(writer.id());
  ASSERT_TRUE(closed.written_back());
  ASSERT_EQ(closed.generations_size(), 1);
  EXPECT_EQ(closed.generations(0).generation(), 2u);
  EXPECT_EQ(closed.generations(0).external_writes(), 1u);
  EXPECT_EQ(Counters(Describe("m")),
            (std::vector<std::string>{":1/0", "layers.0:1/0", "layers.1:2/1"}));
  ASSERT_TRUE(stream->Read(&seen));
  ASSERT_EQ(seen.units_size(), 3);
  EXPECT_EQ(seen.units(2).unit(), "layers.1");
  EXPECT_EQ(seen.units(2).external_writes(), 1u);
  EXPECT_EQ(seen.units(2).generation(), 2u);
  EXPECT_EQ(seen.units(1).external_writes(), 0u);
  // MapShards and phase replies carry the counters too.
  const pb::MapShardsResponse mapped = Map("m", 1);
  EXPECT_EQ(mapped.units(2).external_writes(), 1u);
  pb::ReportPhaseResponse report;
  ASSERT_TRUE(
      ReportPhase("m", 0, pb::TRAINING_PHASE_IDLE, std::nullopt, &report).ok());
  EXPECT_EQ(report.generations(2).external_writes(), 1u);
  watch_context.TryCancel();
}

TEST_F(TrainerContractTest,
       InitExternalTrainerFillsShardsThenMarksInitialized) {
  StartServer(kRanks);
  pb::CreateModelRequest create;
  create.set_name("m");
  create.set_layout_json(kBlocksLayout);
  create.mutable_init()->mutable_external();
  pb::Model created;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(summon_->CreateModel(&context, create, &created).ok());
  }
  EXPECT_EQ(created.state(), pb::MODEL_STATE_AWAITING_INIT);
  EXPECT_EQ(Summary("m").state(), pb::MODEL_STATE_AWAITING_INIT);
  pb::Session refused;
  grpc::Status open = TryOpen("m", ReadOnly(), &refused);
  EXPECT_CODE(open, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(open.error_message(), "AWAITING_INIT"));
  // The trainer writes values of its own (the seeded init with seed 7) into
  // each rank's shard through the mapped segment.
  constexpr uint64_t kTrainerSeed = 7;
  for (int rank = 0; rank < kRanks; ++rank) {
    const pb::MapShardsResponse mapped = Map("m", rank);
    EXPECT_EQ(mapped.state(), pb::MODEL_STATE_AWAITING_INIT);
    const int fd = shm_open(mapped.segment_name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << mapped.segment_name();
    void* base = mmap(nullptr, mapped.segment_bytes(), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(base, MAP_FAILED);
    for (const pb::UnitShard& unit : mapped.units()) {
      EXPECT_EQ(unit.shard_flat_offset(), rank * unit.chunk_numel());
      EXPECT_EQ(unit.position(), rank);
      int64_t layout_numel = 0;
      for (const pb::Parameter& param : unit.layout()) {
        layout_numel = param.flat_offset() + param.info().numel();
      }
      EXPECT_LE(layout_numel, unit.unpadded_numel());
      auto* shard = reinterpret_cast<float*>(static_cast<char*>(base) +
                                             unit.params_offset());
      for (const pb::ParamShard& param : unit.params()) {
        const std::vector<float> values =
            Seeded(param.info().fqn(), param.info().numel(), kTrainerSeed);
        std::memcpy(shard + param.offset_in_shard(),
                    values.data() + param.element_offset(),
                    param.numel() * sizeof(float));
      }
    }
    munmap(base, mapped.segment_bytes());
  }
  const pb::MapShardsResponse root = Map("m", 0);
  ASSERT_EQ(root.units(0).layout_size(), 2);
  EXPECT_EQ(root.units(0).layout(0).info().fqn(), "embed.w");
  ASSERT_EQ(root.units(0).layout(0).aliases_size(), 1);
  EXPECT_EQ(root.units(0).layout(0).aliases(0), "head.w");
  pb::MarkInitializedRequest mark;
  mark.set_model("m");
  pb::MarkInitializedResponse marked;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(trainer_->MarkInitialized(&context, mark, &marked).ok());
  }
  ASSERT_EQ(marked.units_size(), 3);
  EXPECT_EQ(marked.units(0).generation(), 1u);
  EXPECT_EQ(marked.units(0).external_writes(), 0u);
  EXPECT_EQ(Describe("m").state(), pb::MODEL_STATE_READY);
  {
    grpc::ClientContext context;
    EXPECT_CODE(trainer_->MarkInitialized(&context, mark, &marked),
                FAILED_PRECONDITION);
  }
  const pb::Session session = Open("m", ReadOnly());
  for (const auto& [fqn, numel] : kBlocksParams) {
    EXPECT_EQ(Read(session.id(), fqn), Seeded(fqn, numel, kTrainerSeed)) << fqn;
  }
  Close(session.id());
  // AWAITING_INIT survives a restart until marked; READY does too.
  RestartServer();
  EXPECT_EQ(Describe("m").state(), pb::MODEL_STATE_READY);
}

TEST_F(TrainerContractTest, UnlinkedSegmentIsDegradedThenMissingUntilReloaded) {
  StartServer(kRanks);
  CreateSeeded("m");
  CreateSeeded("n");
  Save("m", "m.safetensors");
  // What multiprocessing.shared_memory does at a client's exit.
  const std::string segment = Map("m", 1).segment_name();
  ASSERT_EQ(shm_unlink(segment.c_str()), 0);
  ASSERT_EQ(shm_unlink(Map("n", 0).segment_name().c_str()), 0);
  pb::ModelSummary degraded = Summary("m");
  EXPECT_EQ(degraded.state(), pb::MODEL_STATE_DEGRADED);
  EXPECT_TRUE(absl::StrContains(degraded.state_detail(), segment))
      << degraded.state_detail();
  // The daemon still maps it, so sessions work until it exits.
  EXPECT_EQ(Read(Open("m", ReadOnly()).id(), "norm.w"), Seeded("norm.w", 10));
  for (const pb::Session& session : [&] {
         pb::ListSessionsResponse list;
         grpc::ClientContext context;
         summon_->ListSessions(&context, {}, &list);
         return std::vector<pb::Session>(list.sessions().begin(),
                                         list.sessions().end());
       }()) {
    Close(session.id());
  }
  RestartServer();
  const pb::ModelSummary missing = Summary("m");
  EXPECT_EQ(missing.state(), pb::MODEL_STATE_MISSING_SHARDS);
  EXPECT_TRUE(absl::StrContains(missing.state_detail(), "model load m"))
      << missing.state_detail();
  pb::Session refused;
  grpc::Status open = TryOpen("m", ReadOnly(), &refused);
  EXPECT_CODE(open, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(open.error_message(), "MISSING_SHARDS"))
      << open.error_message();
  EXPECT_EQ(Describe("m").state(), pb::MODEL_STATE_MISSING_SHARDS);
  // A load refills it; a delete removes the other one.
  ASSERT_TRUE(Load("m", "m.safetensors").ok());
  EXPECT_EQ(Summary("m").state(), pb::MODEL_STATE_READY);
  const pb::Session session = Open("m", ReadOnly());
  for (const auto& [fqn, numel] : kBlocksParams) {
    EXPECT_EQ(Read(session.id(), fqn), Seeded(fqn, numel)) << fqn;
  }
  Close(session.id());
  ASSERT_TRUE(Delete("n").ok());
}

TEST_F(TrainerContractTest, LoadThatCreatesTakesGradientOptions) {
  StartServer(kRanks);
  CreateSeeded("m");
  Save("m", "m.safetensors");
  pb::LoadModelRequest request;
  request.mutable_create()->add_unit_prefixes("layers.*");
  request.mutable_grads()->add_ranks(1);
  ASSERT_TRUE(Load("c", "m.safetensors", nullptr, request).ok());
  const pb::Model model = Describe("c");
  EXPECT_FALSE(model.ranks(0).has_grads());
  EXPECT_TRUE(model.ranks(1).has_grads());
  EXPECT_FALSE(Map("c", 1).grads_segment_name().empty());
  EXPECT_TRUE(Map("c", 0).grads_segment_name().empty());
  // Grads only with create.
  pb::LoadModelRequest bad;
  bad.mutable_grads();
  EXPECT_CODE(Load("m", "m.safetensors", nullptr, bad), INVALID_ARGUMENT);
}

}  // namespace
}  // namespace summon::tests
