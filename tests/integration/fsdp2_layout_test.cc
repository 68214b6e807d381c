// The FSDP2 layout kind end to end through a real summond: every rank's
// shard holds exactly what torch.chunk gives FSDP2 (each parameter's chunk
// padded to chunk 0's shape, the padded chunks back to back), sessions
// gather the seeded values under every strategy and placement, writebacks
// land in every replica's padded chunks and nowhere else, and checkpoints
// round-trip strided (shard_dim 1) chunks. The expected shards come from
// TorchPaddedChunk below, written from torch's _init_sharded_param and not
// from core/.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

// 4 ranks: embed.w 10 rows -> 3,3,3,1; norm.w [3] -> 1,1,1,0 (an empty
// chunk); attn.w 5 rows -> 2,2,1,0; mlp.w Shard(1) of 8 columns -> 2 each.
constexpr char kFsdp2Layout[] = R"({"kind": "fsdp2", "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"},
      {"fqn": "norm.w", "shape": [3], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [5, 3], "dtype": "float32"},
      {"fqn": "layers.0.attn.b", "shape": [5], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [2, 8], "dtype": "float32",
       "shard_dim": 1}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";

struct Fsdp2Param {
  std::string fqn;
  std::vector<int64_t> shape;
  int shard_dim;
};

// Per unit, in order.
const std::vector<std::vector<Fsdp2Param>>& Units() {
  static const auto* units = new std::vector<std::vector<Fsdp2Param>>{
      {{"embed.w", {10, 4}, 0}, {"norm.w", {3}, 0}},
      {{"layers.0.attn.w", {5, 3}, 0},
       {"layers.0.attn.b", {5}, 0},
       {"layers.0.mlp.w", {2, 8}, 1}},
      {{"layers.1.w", {7, 5}, 0}}};
  return *units;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t dim : shape) numel *= dim;
  return numel;
}

TensorValues SeededValues(uint64_t seed = kSeed,
                          const std::string& suffix = "") {
  TensorValues values;
  for (const auto& unit : Units()) {
    for (const Fsdp2Param& param : unit) {
      values[param.fqn] =
          Seeded(param.fqn + suffix, Numel(param.shape), seed);
    }
  }
  return values;
}

// torch.chunk(full, G, dim)[r] (empty past the last chunk) zero-padded along
// `dim` to chunk 0's size, row-major: FSDPParam._sharded_param_data.
std::vector<float> TorchPaddedChunk(const std::vector<float>& full,
                                    const Fsdp2Param& param, int group_size,
                                    int position) {
  const auto& shape = param.shape;
  const int dim = param.shard_dim;
  const int64_t rows = (shape[dim] + group_size - 1) / group_size;
  int64_t outer = 1;
  int64_t inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<float> chunk(static_cast<size_t>(outer * rows * inner), 0.0f);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < rows; ++k) {
      const int64_t row = position * rows + k;
      if (row >= shape[dim]) break;
      for (int64_t i = 0; i < inner; ++i) {
        chunk[(o * rows + k) * inner + i] =
            full[(o * shape[dim] + row) * inner + i];
      }
    }
  }
  return chunk;
}

// A rank's unit shard as FSDP2's all-gather input: the padded chunks back to
// back in parameter order.
std::vector<float> ExpectedUnitShard(const TensorValues& values, int unit,
                                     int group_size, int position) {
  std::vector<float> shard;
  for (const Fsdp2Param& param : Units()[unit]) {
    std::vector<float> chunk =
        TorchPaddedChunk(values.at(param.fqn), param, group_size, position);
    shard.insert(shard.end(), chunk.begin(), chunk.end());
  }
  return shard;
}

// `numel` floats of a shared-memory segment from `offset` bytes.
std::vector<float> SegmentFloats(const std::string& name, uint64_t offset,
                                 int64_t numel) {
  std::vector<float> values(static_cast<size_t>(numel));
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  EXPECT_GE(fd, 0) << name << ": " << std::strerror(errno);
  if (fd < 0) return values;
  const ssize_t bytes = static_cast<ssize_t>(numel * sizeof(float));
  EXPECT_EQ(pread(fd, values.data(), bytes, static_cast<off_t>(offset)), bytes);
  close(fd);
  return values;
}

class Fsdp2LayoutTest : public SummondTest {
 protected:
  // Every rank's raw shard of every unit equals torch's padded chunks of
  // `values` (padding zero), and ModelChecksum agrees.
  void ExpectShardsHold(const std::string& model, const TensorValues& values,
                        int group_size, const std::string& context) {
    for (int rank = 0; rank < 4; ++rank) {
      const pb::MapShardsResponse map = MapShards(model, rank);
      ASSERT_EQ(map.units_size(), 3);
      for (int u = 0; u < 3; ++u) {
        const std::vector<float> expected =
            ExpectedUnitShard(values, u, group_size, rank % group_size);
        ASSERT_EQ(map.units(u).chunk_numel(),
                  static_cast<int64_t>(expected.size()));
        EXPECT_EQ(SegmentFloats(map.segment_name(), map.units(u).params_offset(),
                                map.units(u).chunk_numel()),
                  expected)
            << context << " rank " << rank << " unit " << u;
      }
    }
  }

  TensorValues ReadAll(const std::string& session) {
    TensorValues values;
    for (const auto& unit : Units()) {
      for (const Fsdp2Param& param : unit) {
        values[param.fqn] = Read(session, param.fqn);
      }
    }
    return values;
  }
};

TEST_F(Fsdp2LayoutTest, DescribeAndMapShardsGiveEveryParametersChunk) {
  StartServer(4);
  CreateSeeded("f", pb::SHARDING_STRATEGY_FULL_SHARD, kFsdp2Layout);
  const pb::Model model = Describe("f");
  EXPECT_EQ(model.layout_kind(), pb::LAYOUT_KIND_FSDP2);
  ASSERT_EQ(model.units_size(), 3);
  EXPECT_EQ(model.units(0).chunk_numel(), 12 + 1);
  EXPECT_EQ(model.units(1).chunk_numel(), 6 + 2 + 4);
  EXPECT_EQ(model.units(2).chunk_numel(), 10);
  const pb::Unit& layer = model.units(1);
  EXPECT_EQ(layer.unpadded_numel(), 48);  // 4 x 12, the all-gather output.
  EXPECT_EQ(layer.params(1).flat_offset(), 6);
  EXPECT_EQ(layer.params(1).padded_chunk_numel(), 2);
  EXPECT_EQ(layer.params(2).flat_offset(), 8);
  EXPECT_EQ(layer.params(2).shard_dim(), 1);
  EXPECT_EQ(model.units(0).params(0).aliases(0), "head.w");

  // Rank 3: attn.w and attn.b have empty chunks but keep their padded
  // storage; mlp.w holds columns 6-7 as a [2, 2] block.
  const pb::MapShardsResponse rank3 = MapShards("f", 3);
  const pb::UnitShard& unit = rank3.units(1);
  EXPECT_EQ(unit.kind(), pb::LAYOUT_KIND_FSDP2);
  ASSERT_EQ(unit.params_size(), 3);
  const pb::ParamShard& attn_w = unit.params(0);
  EXPECT_EQ(attn_w.numel(), 0);
  EXPECT_EQ(attn_w.offset_in_shard(), 0);
  EXPECT_EQ(std::vector<int64_t>(attn_w.local_shape().begin(),
                                 attn_w.local_shape().end()),
            (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(std::vector<int64_t>(attn_w.padded_local_shape().begin(),
                                 attn_w.padded_local_shape().end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(unit.params(1).offset_in_shard(), 6);
  const pb::ParamShard& mlp_w = unit.params(2);
  EXPECT_EQ(mlp_w.offset_in_shard(), 8);
  EXPECT_EQ(mlp_w.element_offset(), 6);
  EXPECT_EQ(mlp_w.numel(), 4);
  EXPECT_EQ(mlp_w.shard_dim(), 1);
  EXPECT_EQ(std::vector<int64_t>(mlp_w.local_shape().begin(),
                                 mlp_w.local_shape().end()),
            (std::vector<int64_t>{2, 2}));
  // Rank 2 holds attn.w's last row, padded to two.
  const pb::MapShardsResponse rank2 = MapShards("f", 2);
  const pb::ParamShard& last_row = rank2.units(1).params(0);
  EXPECT_EQ(last_row.element_offset(), 12);
  EXPECT_EQ(last_row.numel(), 3);
  EXPECT_EQ(last_row.local_shape(0), 1);
  EXPECT_EQ(last_row.padded_local_shape(0), 2);
}

struct StrategyCase {
  pb::ShardingStrategy strategy;
  const char* extra;  // Top-level JSON keys added to the layout.
  int group_size;     // On 1 node x 4 ranks.
};

// Seeded values gather under every strategy and placement; an edit written
// back reaches every replica's padded chunk and leaves the padding zero.
TEST_F(Fsdp2LayoutTest, EveryStrategyGathersAndWritesBackTorchsChunks) {
  StartServer(4);
  const StrategyCase cases[] = {
      {pb::SHARDING_STRATEGY_FULL_SHARD, "", 4},
      {pb::SHARDING_STRATEGY_SHARD_GRAD_OP, "", 4},
      {pb::SHARDING_STRATEGY_NO_SHARD, "", 1},
      {pb::SHARDING_STRATEGY_HYBRID_SHARD, "", 4},
      {pb::SHARDING_STRATEGY_HYBRID_SHARD, R"("shard_group_size": 2, )", 2},
  };
  int index = 0;
  for (const StrategyCase& test : cases) {
    const std::string name = absl::StrCat("f", index++);
    std::string layout = kFsdp2Layout;
    layout.insert(1, test.extra);
    const pb::Model created =
        CreateSeeded(name, test.strategy, layout, std::vector<int>{});
    ASSERT_EQ(created.group_size(), test.group_size) << name;
    const std::string context = absl::StrCat(name, " G=", test.group_size);
    const TensorValues seeded = SeededValues();
    ExpectShardsHold(name, seeded, test.group_size, context);

    pb::SessionOptions home;
    home.set_rank0_only(true);
    home.set_home_rank(3);
    pb::SessionOptions offload;
    offload.set_offload_to_cpu(true);
    for (const pb::SessionOptions& options : {ReadOnly(), ReadOnly(home),
                                              ReadOnly(offload)}) {
      const pb::Session session = Open(name, options);
      EXPECT_EQ(ReadAll(session.id()), seeded) << context;
      Close(session.id());
    }
    pb::SessionOptions grads = ReadOnly();
    grads.set_with_grads(true);
    const pb::Session with_grads = Open(name, grads);
    for (const auto& [fqn, values] : SeededValues(kGradSeed, ".grad")) {
      EXPECT_EQ(Read(with_grads.id(), fqn, /*grad=*/true), values)
          << context << " " << fqn;
    }
    Close(with_grads.id());

    TensorValues edited = seeded;
    edited["embed.w"] = Scaled(seeded.at("embed.w"), -2);
    edited["layers.0.mlp.w"] = Seeded("other", 16, 99);
    edited["norm.w"] = {1.5f, 2.5f, 3.5f};
    const pb::Session writer = Open(name);
    for (const char* fqn : {"embed.w", "layers.0.mlp.w", "norm.w"}) {
      ASSERT_TRUE(WriteFloats(writer.id(), fqn, edited[fqn]).ok()) << fqn;
    }
    const pb::CloseSessionResponse closed = Close(writer.id());
    EXPECT_TRUE(closed.written_back()) << context;
    ExpectShardsHold(name, edited, test.group_size, context + " after edit");
    // A rank0_only session scatters its writeback from the home rank and an
    // offloaded one from the node's host copy.
    for (bool offloaded : {false, true}) {
      pb::SessionOptions options;
      options.set_rank0_only(!offloaded);
      options.set_home_rank(2);
      options.set_offload_to_cpu(offloaded);
      const pb::Session session = Open(name, options);
      edited["layers.1.w"] = Scaled(edited.at("layers.1.w"), 3);
      ASSERT_TRUE(
          WriteFloats(session.id(), "layers.1.w", edited["layers.1.w"]).ok());
      EXPECT_TRUE(Close(session.id()).written_back()) << context;
      ExpectShardsHold(name, edited, test.group_size,
                       absl::StrCat(context, offloaded ? " offloaded" : " home"));
    }
    const pb::Session reader = Open(name, ReadOnly());
    EXPECT_EQ(ReadAll(reader.id()), edited) << context;
    EXPECT_EQ(Read(reader.id(), "head.w"), edited["embed.w"]);
    Close(reader.id());
    if (HasFatalFailure()) return;
  }
}

// A trainer binds each FSDP2 parameter's storage the way MapShards says
// (padded_local_shape at offset_in_shard) and fills it with what torch holds
// there; after MarkInitialized a session gathers the full tensors.
TEST_F(Fsdp2LayoutTest, ATrainerFillsEachParametersPaddedStorage) {
  StartServer(4);
  pb::CreateModelRequest create;
  create.set_name("t");
  create.set_layout_json(kFsdp2Layout);
  create.mutable_init()->mutable_external();
  {
    pb::Model model;
    grpc::ClientContext context;
    const grpc::Status status = summon_->CreateModel(&context, create, &model);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const TensorValues values = SeededValues(/*seed=*/1234);
  for (int rank = 0; rank < 4; ++rank) {
    const pb::MapShardsResponse map = MapShards("t", rank);
    const int fd = shm_open(map.segment_name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    for (int u = 0; u < map.units_size(); ++u) {
      const pb::UnitShard& unit = map.units(u);
      ASSERT_EQ(unit.params_size(), static_cast<int>(Units()[u].size()));
      for (int p = 0; p < unit.params_size(); ++p) {
        const pb::ParamShard& shard = unit.params(p);
        const std::vector<float> chunk =
            TorchPaddedChunk(values.at(shard.info().fqn()), Units()[u][p], 4,
                             rank);
        int64_t padded = 1;
        for (int64_t dim : shard.padded_local_shape()) padded *= dim;
        ASSERT_EQ(padded, static_cast<int64_t>(chunk.size()))
            << shard.info().fqn();
        const ssize_t bytes = static_cast<ssize_t>(chunk.size() * 4);
        ASSERT_EQ(pwrite(fd, chunk.data(), bytes,
                         static_cast<off_t>(unit.params_offset() +
                                            shard.offset_in_shard() * 4)),
                  bytes);
      }
    }
    close(fd);
  }
  pb::MarkInitializedRequest mark;
  mark.set_model("t");
  pb::MarkInitializedResponse marked;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(trainer_->MarkInitialized(&context, mark, &marked).ok());
  }
  const pb::Session session = Open("t", ReadOnly());
  EXPECT_EQ(ReadAll(session.id()), values);
  Close(session.id());
}

// SaveModel writes each strided Shard(1) chunk run by run and LoadModel reads
// it back into an existing fsdp2 model of another group size.
TEST_F(Fsdp2LayoutTest, CheckpointRoundTripsStridedChunks) {
  StartServer(4);
  CreateSeeded("f", pb::SHARDING_STRATEGY_FULL_SHARD, kFsdp2Layout);
  pb::SaveModelRequest save;
  save.set_model("f");
  save.set_path("f.safetensors");
  pb::SaveModelResponse saved;
  {
    grpc::ClientContext context;
    const grpc::Status status = summon_->SaveModel(&context, save, &saved);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  // "g" shards in pairs (HSDP), so each of its chunks gathers from a
  // different range of the file than "f"'s did.
  std::string hsdp = kFsdp2Layout;
  hsdp.insert(1, R"("shard_group_size": 2, )");
  pb::CreateModelRequest create;
  create.set_name("g");
  create.set_layout_json(hsdp);
  create.set_strategy(pb::SHARDING_STRATEGY_HYBRID_SHARD);
  {
    pb::Model model;
    grpc::ClientContext context;
    const grpc::Status status = summon_->CreateModel(&context, create, &model);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  TensorValues zeros = SeededValues();
  for (auto& [fqn, values] : zeros) values.assign(values.size(), 0.0f);
  ExpectShardsHold("g", zeros, 2, "created");
  pb::LoadModelRequest load;
  load.set_model("g");
  load.set_path("f.safetensors");
  pb::LoadModelResponse loaded;
  {
    grpc::ClientContext context;
    const grpc::Status status = summon_->LoadModel(&context, load, &loaded);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(loaded.bytes_read(), (40 + 3 + 15 + 5 + 16 + 35) * 4);
  ExpectShardsHold("g", SeededValues(), 2, "loaded");
}

}  // namespace
}  // namespace summon::tests
