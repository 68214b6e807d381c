#include "server/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/seeded_init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint/checkpoint_roots.h"
#include "server/checkpoint/safetensors.h"
#include "server/testing/checkpoint_test_model.h"

namespace summon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

const std::vector<std::string> kPrimaries = {
    "embed.w",    "norm.w",     "layers.0.w", "layers.0.b",
    "layers.1.w", "layers.1.b", "layers.2.w"};

std::string SeededBytes(absl::string_view fqn, core::DType dtype,
                        int64_t numel) {
  std::string bytes(numel * core::ElementSize(dtype), '\0');
  EXPECT_TRUE(core::FillSeeded(fqn, kSeed, dtype, 0, numel, bytes.data()).ok());
  return bytes;
}

// The bytes of a whole tensor as stored in a checkpoint.
std::string StoredBytes(const std::string& path, const std::string& name) {
  absl::StatusOr<SafetensorsCheckpoint> checkpoint =
      OpenSafetensorsCheckpoint(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return "";
  auto found = checkpoint->by_name.find(name);
  if (found == checkpoint->by_name.end()) return "<absent>";
  const SafetensorsTensorRef& tensor = checkpoint->tensors[found->second];
  const SafetensorsEntry& entry = checkpoint->Entry(tensor);
  const SafetensorsFile& file = checkpoint->files[tensor.file];
  std::string bytes(entry.end - entry.begin, '\0');
  EXPECT_TRUE(PreadFully(file.fd.get(), bytes.data(), entry.end - entry.begin,
                         file.header.data_start + entry.begin)
                  .ok());
  return bytes;
}

void ExpectStoresSeededPrimaries(const std::string& path,
                                 const core::ModelSpec& model) {
  for (const std::string& name : kPrimaries) {
    const core::FlatParamEntry& param = model.Param(*model.FindParam(name));
    EXPECT_EQ(StoredBytes(path, name),
              SeededBytes(name, param.dtype, param.numel))
        << name;
  }
}

int64_t FileSize(const std::string& path) {
  struct stat info;
  EXPECT_EQ(stat(path.c_str(), &info), 0) << path;
  return info.st_size;
}

struct TopologyCase {
  std::string name;
  core::Strategy strategy;
  core::Topology topology;
  bool use_orig_params;
};

class CheckpointRoundTripTest : public testing::TestWithParam<TopologyCase> {
 protected:
  CheckpointRoundTripTest()
      : model_(Model(GetParam().strategy, GetParam().topology,
                     GetParam().use_orig_params)),
        source_(model_),
        dir_(MakeTempDir()) {
    source_.FillOwnedSlices(AllRanks(model_), kSeed);
  }

  // Loads `path` into marker-filled shards of every rank and expects exactly
  // the source's bytes, padding included.
  void ExpectLoadsSource(const std::string& path) {
    Shards loaded(model_);
    absl::StatusOr<int64_t> bytes_read =
        LoadCheckpoint(path, model_, AllRanks(model_), loaded.Address());
    ASSERT_TRUE(bytes_read.ok()) << bytes_read.status();
    // Each element is read once: replicas copy instead of reading again.
    EXPECT_EQ(*bytes_read, kTensorBytes);
    ExpectSameShards(model_, loaded, source_, AllRanks(model_));
  }

  core::ModelSpec model_;
  Shards source_;
  std::string dir_;
};

TEST_P(CheckpointRoundTripTest, OneFile) {
  const std::string path = dir_ + "/model.safetensors";
  absl::StatusOr<SavedCheckpoint> saved = SaveCheckpoint(
      path, model_, AllRanks(model_), source_.Address(), {{"step", "9"}});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_THAT(saved->files, ElementsAre(path));
  EXPECT_EQ(saved->bytes_written, FileSize(path));
  EXPECT_THAT(FilesIn(dir_), ElementsAre("model.safetensors"));

  absl::StatusOr<SafetensorsHeader> header =
      ReadSafetensorsHeaderFromFile(path);
  ASSERT_TRUE(header.ok()) << header.status();
  std::vector<std::string> names;
  for (const SafetensorsEntry& entry : header->entries) {
    names.push_back(entry.name);
  }
  EXPECT_EQ(names, kPrimaries);  // Model order; the tied alias not written.
  EXPECT_THAT(header->metadata,
              ElementsAre(Pair("format", "pt"), Pair("step", "9")));
  EXPECT_EQ(FileSize(path), header->data_start + kTensorBytes);
  ExpectStoresSeededPrimaries(path, model_);
  ExpectLoadsSource(path);
}

TEST_P(CheckpointRoundTripTest, DirectoryWithIndex) {
  const std::string path = dir_ + "/out";
  absl::StatusOr<SavedCheckpoint> saved =
      SaveCheckpoint(path, model_, AllRanks(model_), source_.Address(), {},
                     /*max_file_bytes=*/100);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // Tensor bytes 160 | 12 | 100 | 20+42+2 | 48: a tensor over the cap gets
  // its own file, the next that would overflow a file starts a new one.
  const std::vector<std::string> files = {
      "model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
      "model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors",
      "model-00005-of-00005.safetensors", "model.safetensors.index.json"};
  EXPECT_EQ(FilesIn(path), files);
  ASSERT_EQ(saved->files.size(), files.size());
  int64_t bytes = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    EXPECT_EQ(saved->files[f], path + "/" + files[f]);
    bytes += FileSize(saved->files[f]);
  }
  EXPECT_EQ(saved->bytes_written, bytes);

  std::ifstream index_file(path + "/model.safetensors.index.json");
  const std::string index_text((std::istreambuf_iterator<char>(index_file)),
                               std::istreambuf_iterator<char>());
  absl::StatusOr<SafetensorsIndex> index = ParseSafetensorsIndex(index_text);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_THAT(
      index->weight_map,
      ElementsAre(Pair("embed.w", files[0]), Pair("norm.w", files[1]),
                  Pair("layers.0.w", files[2]), Pair("layers.0.b", files[3]),
                  Pair("layers.1.w", files[3]), Pair("layers.1.b", files[3]),
                  Pair("layers.2.w", files[4])));
  EXPECT_EQ(index->metadata.at("total_size"), absl::StrCat(kTensorBytes));
  ExpectStoresSeededPrimaries(path, model_);
  ExpectLoadsSource(path);
  ExpectLoadsSource(path + "/model.safetensors.index.json");
}

TEST_P(CheckpointRoundTripTest, LoadTouchesOnlyTheGivenRanks) {
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_TRUE(
      SaveCheckpoint(path, model_, AllRanks(model_), source_.Address(), {})
          .ok());
  const int last = model_.groups.topology.world_size() - 1;
  Shards loaded(model_);
  ASSERT_TRUE(LoadCheckpoint(path, model_, {last}, loaded.Address()).ok());
  ExpectSameShards(model_, loaded, source_, {last});
  const Shards untouched(model_);
  for (int rank = 0; rank < last; ++rank) {
    ExpectSameShards(model_, loaded, untouched, {rank});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Topologies, CheckpointRoundTripTest,
    testing::Values(
        TopologyCase{"FullShard1x4", core::Strategy::kFullShard, {1, 4}, true},
        TopologyCase{
            "FullShard2x3Flat", core::Strategy::kFullShard, {2, 3}, false},
        // More ranks than some parameters have elements: pure-padding slices.
        TopologyCase{
            "FullShard1x16", core::Strategy::kFullShard, {1, 16}, true},
        TopologyCase{
            "ShardGradOp1x1", core::Strategy::kShardGradOp, {1, 1}, true},
        TopologyCase{"NoShard1x3", core::Strategy::kNoShard, {1, 3}, true},
        TopologyCase{
            "HybridShard2x2", core::Strategy::kHybridShard, {2, 2}, true},
        TopologyCase{
            "HybridShard3x2Flat", core::Strategy::kHybridShard, {3, 2}, false}),
    [](const testing::TestParamInfo<TopologyCase>& info) {
      return info.param.name;
    });

TEST(SaveCheckpointTest, WritesEachPositionFromTheGivenRanks) {
  const core::ModelSpec model = Model(core::Strategy::kHybridShard, {2, 2});
  Shards shards(model);
  shards.FillOwnedSlices({2, 3}, kSeed);  // Node 0's ranks keep the marker.
  const std::string path = MakeTempDir() + "/m.safetensors";
  ASSERT_TRUE(SaveCheckpoint(path, model, {3, 2}, shards.Address(), {}).ok());
  ExpectStoresSeededPrimaries(path, model);
}

// A directory beneath the root swapped for a symlink out of it after the
// path was resolved: with the daemon's admission the save creates and
// renames nothing outside (R20); the same save without it would.
TEST(SaveCheckpointTest, R20_CreatesAndRenamesOnlyInVettedDirectories) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 2});
  Shards shards(model);
  shards.FillOwnedSlices(AllRanks(model), kSeed);
  const std::string base = MakeTempDir();
  std::filesystem::create_directories(base + "/root");
  std::filesystem::create_directories(base + "/outside");
  std::filesystem::create_directory_symlink(base + "/outside",
                                            base + "/root/swapped");
  const CheckpointRoots roots({base + "/root"});
  for (const std::string name : {"m.safetensors", "dir"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<SavedCheckpoint> saved =
        SaveCheckpoint(base + "/root/swapped/" + name, model, AllRanks(model),
                       shards.Address(), {}, kDefaultMaxCheckpointFileBytes,
                       roots.Admission());
    ASSERT_FALSE(saved.ok());
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kPermissionDenied)
        << saved.status();
  }
  // At most the empty directory of the directory form's mkdir.
  EXPECT_THAT(FilesIn(base + "/outside"), testing::IsSubsetOf({"dir"}));
  EXPECT_THAT(FilesIn(base + "/outside/dir"), testing::IsEmpty());
  ASSERT_TRUE(SaveCheckpoint(base + "/root/m.safetensors", model,
                             AllRanks(model), shards.Address(), {},
                             kDefaultMaxCheckpointFileBytes, roots.Admission())
                  .ok());
  ExpectStoresSeededPrimaries(base + "/root/m.safetensors", model);
}

TEST(SaveCheckpointTest, RefusesRanksThatLeaveAPositionUncovered) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 2});
  Shards shards(model);
  const std::string dir = MakeTempDir();
  absl::StatusOr<SavedCheckpoint> saved =
      SaveCheckpoint(dir + "/m.safetensors", model, {0}, shards.Address(), {});
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(saved.status().message(), HasSubstr("shard position 1"));
  EXPECT_TRUE(FilesIn(dir).empty());
}

TEST(SaveCheckpointTest, RefusesBadArguments) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 2});
  Shards shards(model);
  const std::string dir = MakeTempDir();
  EXPECT_EQ(SaveCheckpoint(dir + "/m.safetensors", model, {0, 1, 2},
                           shards.Address(), {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveCheckpoint(dir + "/d", model, {0, 1}, shards.Address(), {}, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FilesIn(dir).empty());
}

TEST(SaveCheckpointTest, ReplacesAnExistingFileWhole) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 2});
  Shards shards(model);
  shards.FillOwnedSlices({0, 1}, kSeed);
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/m.safetensors";
  std::ofstream(path) << "an older, longer file that must not survive in part";
  ASSERT_TRUE(SaveCheckpoint(path, model, {0, 1}, shards.Address(), {}).ok());
  EXPECT_THAT(FilesIn(dir), ElementsAre("m.safetensors"));
  ExpectStoresSeededPrimaries(path, model);
}

// A tensor of a hand-written checkpoint, seeded as `seeded_as` (default: its
// own name); non-floating tensors hold zeros.
struct HandTensor {
  std::string name;
  core::DType dtype;
  core::Shape shape;
  std::string seeded_as;
};

void WriteHandFile(const std::string& path,
                   const std::vector<HandTensor>& tensors) {
  SafetensorsHeader header;
  std::string data;
  for (const HandTensor& tensor : tensors) {
    const int64_t numel = *core::NumElements(tensor.shape);
    const std::string bytes =
        core::IsFloatingPoint(tensor.dtype)
            ? SeededBytes(
                  tensor.seeded_as.empty() ? tensor.name : tensor.seeded_as,
                  tensor.dtype, numel)
            : std::string(numel * core::ElementSize(tensor.dtype), '\0');
    const int64_t begin = static_cast<int64_t>(data.size());
    header.entries.push_back({tensor.name, tensor.dtype, tensor.shape, numel,
                              begin,
                              begin + static_cast<int64_t>(bytes.size())});
    data += bytes;
  }
  std::ofstream out(path, std::ios::binary);
  out << SerializeSafetensorsHeader(header) << data;
  ASSERT_TRUE(out.good());
}

std::vector<HandTensor> ModelTensors(const core::ModelSpec& model) {
  std::vector<HandTensor> tensors;
  for (const std::string& name : kPrimaries) {
    const core::FlatParamEntry& param = model.Param(*model.FindParam(name));
    tensors.push_back({name, param.dtype, param.shape, ""});
  }
  return tensors;
}

class LoadCheckpointTest : public testing::Test {
 protected:
  LoadCheckpointTest()
      : model_(Model(core::Strategy::kHybridShard, {2, 3})),
        expected_(model_),
        path_(MakeTempDir() + "/hand.safetensors") {
    expected_.FillOwnedSlices(AllRanks(model_), kSeed);
  }

  // Loads the hand-written file and expects `code`, a message containing
  // `message`, and shards untouched on failure.
  void ExpectLoad(const std::vector<HandTensor>& tensors, absl::StatusCode code,
                  const std::string& message = "") {
    WriteHandFile(path_, tensors);
    Shards loaded(model_);
    absl::StatusOr<int64_t> bytes_read =
        LoadCheckpoint(path_, model_, AllRanks(model_), loaded.Address());
    ASSERT_EQ(bytes_read.status().code(), code) << bytes_read.status();
    EXPECT_THAT(bytes_read.status().message(), HasSubstr(message));
    ExpectSameShards(model_, loaded,
                     bytes_read.ok() ? expected_ : Shards(model_),
                     AllRanks(model_));
  }

  core::ModelSpec model_;
  Shards expected_;
  std::string path_;
};

TEST_F(LoadCheckpointTest, AcceptsATiedAliasInsteadOfItsPrimary) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors[0].name = "head.w";  // Hugging Face kept the other tied name.
  tensors[0].seeded_as = "embed.w";
  ExpectLoad(tensors, absl::StatusCode::kOk);
}

TEST_F(LoadCheckpointTest, IgnoresTensorsTheModelDoesNotHave) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors.insert(tensors.begin(),
                 {"embed.position_ids", core::DType::kInt64, {1, 7}, ""});
  tensors.push_back({"extra.w", core::DType::kFloat32, {3}, ""});
  ExpectLoad(tensors, absl::StatusCode::kOk);
}

TEST_F(LoadCheckpointTest, RefusesAMismatchedDtype) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors[4].dtype = core::DType::kFloat32;  // layers.1.w is bfloat16.
  ExpectLoad(tensors, absl::StatusCode::kInvalidArgument,
             "checkpoint tensor 'layers.1.w' is float32[3, 7] but parameter "
             "'layers.1.w' is bfloat16[3, 7]");
}

TEST_F(LoadCheckpointTest, RefusesAMismatchedShape) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors[2].shape = {25};  // Same numel, other shape.
  ExpectLoad(tensors, absl::StatusCode::kInvalidArgument, "'layers.0.w'");
}

TEST_F(LoadCheckpointTest, RefusesAMissingTensorBeforeWritingAnything) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors.pop_back();  // layers.2.w, the last: the others would load first.
  ExpectLoad(tensors, absl::StatusCode::kInvalidArgument,
             "checkpoint has no tensor 'layers.2.w'");
}

TEST_F(LoadCheckpointTest, NamesTheAliasesOfAMissingTiedTensor) {
  std::vector<HandTensor> tensors = ModelTensors(model_);
  tensors.erase(tensors.begin());
  ExpectLoad(tensors, absl::StatusCode::kInvalidArgument,
             "no tensor 'embed.w' (nor its tied aliases 'head.w')");
}

TEST_F(LoadCheckpointTest, RefusesARankOutsideTheWorld) {
  WriteHandFile(path_, ModelTensors(model_));
  Shards loaded(model_);
  EXPECT_EQ(
      LoadCheckpoint(path_, model_, {0, 6}, loaded.Address()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(LoadCheckpointTest, MissingPathIsNotFound) {
  Shards loaded(model_);
  EXPECT_EQ(LoadCheckpoint(path_ + ".nope", model_, {0}, loaded.Address())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// Unit FQN -> its parameters, as ParseModelLayout sees the generated layout.
std::vector<std::pair<std::string, std::vector<std::string>>> UnitsOf(
    const core::ModelSpec& model) {
  std::vector<std::pair<std::string, std::vector<std::string>>> units;
  for (const core::UnitSpec& unit : model.units) {
    std::vector<std::string> params;
    for (const core::FlatParamEntry& param : unit.layout.params()) {
      params.push_back(param.fqn);
    }
    units.emplace_back(unit.fqn, params);
  }
  return units;
}

absl::StatusOr<core::ModelSpec> ParseGenerated(
    const absl::StatusOr<std::string>& layout, core::Topology topology) {
  if (!layout.ok()) return layout.status();
  return core::ParseModelLayout(*layout, topology);
}

TEST(LayoutJsonFromCheckpointTest, ReproducesTheSavedModelsShards) {
  const core::ModelSpec model = Model(core::Strategy::kFullShard, {1, 4});
  Shards source(model);
  source.FillOwnedSlices(AllRanks(model), kSeed);
  const std::string path = MakeTempDir() + "/m.safetensors";
  ASSERT_TRUE(
      SaveCheckpoint(path, model, AllRanks(model), source.Address(), {}).ok());
  absl::StatusOr<core::ModelSpec> rebuilt = ParseGenerated(
      LayoutJsonFromCheckpoint(path, {"layers.*"}, core::Strategy::kFullShard,
                               /*use_orig_params=*/true),
      {1, 4});
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  using Unit = std::pair<std::string, std::vector<std::string>>;
  EXPECT_THAT(UnitsOf(*rebuilt),
              ElementsAre(Unit{"", {"embed.w", "norm.w"}},
                          Unit{"layers.0", {"layers.0.w", "layers.0.b"}},
                          Unit{"layers.1", {"layers.1.w", "layers.1.b"}},
                          Unit{"layers.2", {"layers.2.w"}}));
  EXPECT_TRUE(rebuilt->aliases.empty());
  Shards loaded(*rebuilt);
  ASSERT_TRUE(
      LoadCheckpoint(path, *rebuilt, AllRanks(*rebuilt), loaded.Address())
          .ok());
  ExpectSameShards(model, loaded, source, AllRanks(model));
}

TEST(LayoutJsonFromCheckpointTest, OrdersUnitsNaturallyAndParamsByOffset) {
  const std::string path = MakeTempDir() + "/m.safetensors";
  const core::DType f32 = core::DType::kFloat32;
  WriteHandFile(path, {{"z.w", f32, {2}, ""},
                       {"layers.10.mlp.w", f32, {2}, ""},
                       {"layers.2.attn.w", f32, {2}, ""},
                       {"layers.10.attn.w", f32, {2}, ""},
                       {"layers.2.mlp.w", f32, {2}, ""},
                       {"layers.2.mlp.b", f32, {2}, ""},
                       {"a.w", f32, {2}, ""}});
  const absl::StatusOr<std::string> layout = LayoutJsonFromCheckpoint(
      path, {"layers.*.mlp", "layers.*"}, core::Strategy::kNoShard,
      /*use_orig_params=*/false);
  absl::StatusOr<core::ModelSpec> model = ParseGenerated(layout, {1, 2});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->strategy, core::Strategy::kNoShard);
  EXPECT_FALSE(model->use_orig_params);
  using Unit = std::pair<std::string, std::vector<std::string>>;
  EXPECT_THAT(
      UnitsOf(*model),
      ElementsAre(Unit{"", {"z.w", "a.w"}},
                  Unit{"layers.2", {"layers.2.attn.w"}},
                  Unit{"layers.2.mlp", {"layers.2.mlp.w", "layers.2.mlp.b"}},
                  Unit{"layers.10", {"layers.10.attn.w"}},
                  Unit{"layers.10.mlp", {"layers.10.mlp.w"}}));
}

// A matched module stays a unit without tensors of its own; the root does
// not (a zero-length root shard breaks a trainer's plain mmap).
TEST(LayoutJsonFromCheckpointTest, KeepsAMatchedModuleWithoutOwnTensors) {
  const std::string path = MakeTempDir() + "/m.safetensors";
  WriteHandFile(path, {{"blocks.0.inner.w", core::DType::kBFloat16, {3}, ""}});
  absl::StatusOr<core::ModelSpec> model = ParseGenerated(
      LayoutJsonFromCheckpoint(path, {"blocks.*", "blocks.*.inner"},
                               core::Strategy::kFullShard, true),
      {1, 2});
  ASSERT_TRUE(model.ok()) << model.status();
  using Unit = std::pair<std::string, std::vector<std::string>>;
  EXPECT_THAT(UnitsOf(*model),
              ElementsAre(Unit{"blocks.0", {}},
                          Unit{"blocks.0.inner", {"blocks.0.inner.w"}}));
}

TEST(LayoutJsonFromCheckpointTest, RejectsOrSkipsNonFloatingTensors) {
  const std::string path = MakeTempDir() + "/m.safetensors";
  WriteHandFile(path, {{"embed.w", core::DType::kFloat32, {4, 2}, ""},
                       {"embed.position_ids", core::DType::kInt64, {1, 4}, ""},
                       {"mask", core::DType::kBool, {4}, ""}});
  absl::StatusOr<std::string> rejected =
      LayoutJsonFromCheckpoint(path, {}, core::Strategy::kFullShard, true);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(),
              HasSubstr("'embed.position_ids' (int64), 'mask' (bool)"));
  absl::StatusOr<core::ModelSpec> skipped = ParseGenerated(
      LayoutJsonFromCheckpoint(path, {}, core::Strategy::kFullShard, true,
                               NonFloatingTensors::kSkip),
      {1, 1});
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  using Unit = std::pair<std::string, std::vector<std::string>>;
  EXPECT_THAT(UnitsOf(*skipped), ElementsAre(Unit{"", {"embed.w"}}));
}

TEST(LayoutJsonFromCheckpointTest, RefusesBadPatternsAndMixedDtypeUnits) {
  const std::string path = MakeTempDir() + "/m.safetensors";
  WriteHandFile(path, {{"layers.0.w", core::DType::kFloat32, {2}, ""},
                       {"layers.0.b", core::DType::kFloat16, {2}, ""},
                       {"head.w", core::DType::kFloat32, {2}, ""}});
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"layers..0"}, "wrap pattern 'layers..0' is not"},
      {{""}, "wrap pattern '' is not"},
      {{"layers.*", "blocks.*"}, "wrap pattern 'blocks.*' matches no module"},
      // A tensor's own name is not a module.
      {{"layers.*", "head.w"}, "wrap pattern 'head.w' matches no module"},
      // FSDP's one-dtype rule, with the load that would work.
      {{"layers.*"}, "flattens one dtype per unit. Load with dtype"},
  };
  for (const auto& [patterns, message] : cases) {
    absl::StatusOr<std::string> layout = LayoutJsonFromCheckpoint(
        path, patterns, core::Strategy::kFullShard, true);
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument)
        << message;
    EXPECT_THAT(layout.status().message(), HasSubstr(message));
  }
}

}  // namespace
}  // namespace summon::server
