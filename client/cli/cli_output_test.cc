#include "client/cli/cli_output.h"

#include <string>
#include <tuple>

#include "gtest/gtest.h"

namespace summon::client {
namespace {

TEST(TableTest, PadsColumnsToTheWidestCell) {
  Table table({"NAME", "N"});
  table.AddRow({"a", "100"});
  table.AddRow({"longer", "2"});
  EXPECT_EQ(table.ToString(),
            "NAME    N\n"
            "a       100\n"
            "longer  2\n");
}

TEST(TableTest, WithoutHeaderOnlyRows) {
  Table table;
  table.AddRow({"id", "s-1"});
  table.AddRow({"model", "gpt"});
  EXPECT_EQ(table.ToString(), "id     s-1\nmodel  gpt\n");
}

TEST(ToJsonTest, PrintsCanonicalJsonWithDefaults) {
  v1::CloseSessionResponse response;
  response.set_bytes_written(12);
  EXPECT_EQ(ToJson(response),
            "{\n"
            " \"writtenBack\": false,\n"
            " \"bytesWritten\": \"12\",\n"
            " \"generations\": [],\n"
            " \"reason\": \"\"\n"
            "}\n");
}

TEST(OutputTest, ModelList) {
  v1::ListModelsResponse response;
  v1::ModelSummary& model = *response.add_models();
  model.set_name("gpt");
  model.set_strategy(v1::SHARDING_STRATEGY_FULL_SHARD);
  model.set_world_size(4);
  model.set_unit_count(5);
  model.set_param_count(12);
  model.set_numel(123456);
  model.set_open_sessions(1);
  model.set_state(v1::MODEL_STATE_READY);
  v1::ModelSummary& old = *response.add_models();
  old.set_name("old");
  old.set_state(v1::MODEL_STATE_MISSING_SHARDS);
  old.set_state_detail("rank 1's params segment is gone");
  old.set_strategy(v1::SHARDING_STRATEGY_NO_SHARD);
  EXPECT_EQ(
      ModelListTable(response),
      "NAME  STATE           STRATEGY    WORLD  UNITS  PARAMS  NUMEL   "
      "SESSIONS\n"
      "gpt   READY           FULL_SHARD  4      5      12      123456  1\n"
      "old   MISSING_SHARDS  NO_SHARD    0      0      0       0       0\n"
      "old: rank 1's params segment is gone\n");
}

// An FSDP2 model shows its kind instead of use_orig_params and, per
// parameter, the shard dim, the padded chunk and the rows each position
// holds (torch.chunk's split: 5 rows over 4 are 2,2,1,0).
TEST(OutputTest, Fsdp2ModelShowsEveryParametersChunks) {
  v1::Model model;
  model.set_name("f");
  model.set_layout_kind(v1::LAYOUT_KIND_FSDP2);
  model.set_group_size(4);
  v1::Unit& unit = *model.add_units();
  unit.set_fqn("layers.0");
  unit.set_chunk_numel(10);
  for (const auto& [fqn, dim, offset] :
       {std::tuple<const char*, int, int>{"layers.0.w", 0, 0},
        std::tuple<const char*, int, int>{"layers.0.v", 1, 6}}) {
    v1::Parameter& param = *unit.add_params();
    param.mutable_info()->set_fqn(fqn);
    param.mutable_info()->set_dtype(v1::DTYPE_FLOAT32);
    param.set_shard_dim(dim);
    param.set_flat_offset(offset);
  }
  unit.mutable_params(0)->mutable_info()->add_shape(5);
  unit.mutable_params(0)->mutable_info()->add_shape(3);
  unit.mutable_params(1)->mutable_info()->add_shape(2);
  unit.mutable_params(1)->mutable_info()->add_shape(8);
  const std::string table = ModelTable(model);
  EXPECT_NE(table.find("layout_kind         fsdp2\n"), std::string::npos)
      << table;
  EXPECT_EQ(table.find("use_orig_params"), std::string::npos) << table;
  EXPECT_NE(
      table.find("PARAM       UNIT      DTYPE    SHAPE   SHARD_DIM  "
                 "PADDED_CHUNK  CHUNK_ROWS  SHARD_OFFSET  ALIASES\n"
                 "layers.0.w  layers.0  FLOAT32  [5, 3]  0          [2, 3]"
                 "        2,2,1,0     0             -\n"
                 "layers.0.v  layers.0  FLOAT32  [2, 8]  1          [2, 2]"
                 "        2,2,2,2     6             -\n"),
      std::string::npos)
      << table;
}

TEST(OutputTest, ChecksumsInFixedWidthHex) {
  v1::ModelChecksumResponse response;
  v1::ShardChecksum& root = *response.add_shards();
  root.set_rank(0);
  root.set_params(0xabc);
  root.set_generation(2);
  v1::ShardChecksum& layer = *response.add_shards();
  layer.set_rank(1);
  layer.set_unit("layers.0");
  layer.set_params(0xffffffffffffffff);
  layer.set_grads(1);
  EXPECT_EQ(ChecksumTable(response),
            "RANK  UNIT      PARAMS            GRADS             GENERATION\n"
            "0     <root>    0000000000000abc  -                 2\n"
            "1     layers.0  ffffffffffffffff  0000000000000001  0\n");
}

TEST(OutputTest, SessionListShowsScopes) {
  v1::ListSessionsResponse response;
  v1::Session& module = *response.add_sessions();
  module.set_id("s-1");
  module.set_model("gpt");
  module.set_owner("anonymous");
  module.set_state(v1::SESSION_STATE_OPEN);
  module.mutable_options()->mutable_module()->set_fqn("layers.1");
  module.mutable_options()->mutable_module()->set_recurse(false);
  module.mutable_options()->set_writeback(true);
  module.set_expires_at_unix_ms(1700000000123);
  module.set_bytes(400);
  v1::Session& params = *response.add_sessions();
  params.set_id("s-2");
  params.mutable_options()->mutable_params()->add_fqns("a.w");
  params.mutable_options()->mutable_params()->add_fqns("b.w");
  EXPECT_EQ(SessionListTable(response),
            "ID   MODEL  OWNER      STATE        SCOPE                  "
            "WRITEBACK  EXPIRES                   BYTES\n"
            "s-1  gpt    anonymous  OPEN         layers.1 (no recurse)  "
            "true       2023-11-14T22:13:20.123Z  400\n"
            "s-2                    UNSPECIFIED  params a.w,b.w         "
            "false      -                         0\n");
}

TEST(OutputTest, RootScopeIsNamed) {
  v1::Session session;
  session.set_id("s-3");
  v1::TensorInfo& param = *session.add_params();
  param.set_fqn("embed.w");
  param.set_dtype(v1::DTYPE_BFLOAT16);
  param.add_shape(10);
  param.add_shape(4);
  param.set_numel(40);
  v1::UnitGeneration& generation = *session.add_gathered_generations();
  generation.set_generation(7);
  const std::string text = SessionTable(session);
  EXPECT_NE(text.find("scope           <root>\n"), std::string::npos) << text;
  EXPECT_NE(text.find("param  embed.w  BFLOAT16  [10, 4]  40\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<root>  7\n"), std::string::npos) << text;
}

TEST(OutputTest, StatsWithHistogram) {
  v1::TensorStatsResponse response;
  v1::TensorStats& stats = *response.add_tensors();
  stats.mutable_info()->set_fqn("w");
  stats.mutable_info()->set_dtype(v1::DTYPE_FLOAT32);
  stats.mutable_info()->add_shape(4);
  stats.set_min(-0.5);
  stats.set_max(0.25);
  stats.set_mean(0.125);
  stats.set_l2_norm(2);
  stats.set_nan_count(1);
  stats.mutable_histogram()->set_lower(-0.5);
  stats.mutable_histogram()->set_upper(0.25);
  stats.mutable_histogram()->add_counts(1);
  stats.mutable_histogram()->add_counts(2);
  EXPECT_EQ(TensorStatsTable(response),
            "FQN  DTYPE    SHAPE  MIN   MAX   MEAN   L2_NORM  NAN  INF\n"
            "w    FLOAT32  [4]    -0.5  0.25  0.125  2        1    0\n"
            "\n"
            "w histogram [-0.5, 0.25]: 1 2\n");
}

}  // namespace
}  // namespace summon::client
