// The FSDP2 layout kind across real summond processes, 2 nodes x 2 ranks and
// 3 nodes x 1 rank: every rank's shard holds torch.chunk's padded chunks of
// the seeded values (ModelChecksum through every node), sessions of every
// placement gather every element through every node, and a writeback
// reaches every replica's chunks on every node, strided Shard(1) chunks and
// empty chunks included; HSDP's shard_group_size may span the nodes.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

// On 4 ranks: embed.w 9 rows -> 3,3,3,0; norm.w [3] -> 1,1,1,0; on 3
// ranks: 3 each and 1 each. mlp.w is Shard(1) of 12 columns (even on 1, 2,
// 3 and 4).
constexpr char kFsdp2Layout[] = R"({"kind": "fsdp2", "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [9, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"},
      {"fqn": "norm.w", "shape": [3], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [5, 5], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [2, 12], "dtype": "float32",
       "shard_dim": 1}]}]})";
constexpr int64_t kModelNumel = 36 + 3 + 25 + 24;
constexpr uint64_t kEditSeed = 99;

struct Case {
  v1::ShardingStrategy strategy;
  bool whole_world_hsdp;  // shard_group_size = W: HSDP groups across nodes.
};

template <typename Topology>
class ClusterFsdp2Test : public SharedClusterTest<Topology> {};

TYPED_TEST_SUITE(ClusterFsdp2Test, ClusterTopologies, ClusterTopologyNames);

TYPED_TEST(ClusterFsdp2Test, ShardsSessionsAndWritebackAreExactEverywhere) {
  const Case cases[] = {{v1::SHARDING_STRATEGY_FULL_SHARD, false},
                        {v1::SHARDING_STRATEGY_NO_SHARD, false},
                        {v1::SHARDING_STRATEGY_HYBRID_SHARD, false},
                        {v1::SHARDING_STRATEGY_HYBRID_SHARD, true}};
  int index = 0;
  for (const Case& test : cases) {
    const std::string name = absl::StrCat("fsdp2-", index++);
    SCOPED_TRACE(name);
    std::string layout = kFsdp2Layout;
    if (test.whole_world_hsdp) {
      layout.insert(1, absl::StrCat(R"("shard_group_size": )", this->world(),
                                    ", "));
    }
    const v1::Model model =
        CreateSeeded(this->node(this->nodes() - 1), name, layout,
                     test.strategy);
    ASSERT_EQ(model.layout_kind(), v1::LAYOUT_KIND_FSDP2);
    const TensorBytes seeded = SeededModel(model);
    for (int via = 0; via < this->nodes(); ++via) {
      EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(via), name)),
                ExpectedChecksums(model, seeded))
          << "ModelChecksum via node " << via;
    }
    v1::SessionOptions offloaded = ReadOnly();
    offloaded.set_offload_to_cpu(true);
    v1::SessionOptions home = ReadOnly();
    home.set_rank0_only(true);
    home.set_home_rank(this->world() - 1);
    for (const v1::SessionOptions& options : {ReadOnly(), offloaded, home}) {
      const v1::Session session = OpenOk(this->node(0), name, options);
      for (int reader = 0; reader < this->nodes(); ++reader) {
        for (const auto& [fqn, bytes] : seeded) {
          EXPECT_EQ(BytesToFloats(ReadOk(this->node(reader), session.id(),
                                         fqn)),
                    BytesToFloats(bytes))
              << fqn << " via node " << reader << " "
              << options.ShortDebugString();
        }
      }
      CloseOk(this->node(this->nodes() - 1), session.id());
    }

    const TensorBytes edited = SeededModel(model, kEditSeed);
    const v1::Session writer =
        OpenOk(this->node(this->nodes() - 1), name, v1::SessionOptions());
    for (const auto& [fqn, bytes] : edited) {
      WriteOk(this->node(0), writer.id(), fqn, bytes);
    }
    const v1::CloseSessionResponse closed = CloseOk(this->node(0), writer.id());
    EXPECT_TRUE(closed.written_back());
    // Every element into every replica, padding never.
    EXPECT_EQ(closed.bytes_written(),
              this->world() / model.group_size() * kModelNumel * 4);
    for (int via = 0; via < this->nodes(); ++via) {
      EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(via), name)),
                ExpectedChecksums(model, edited))
          << "after writeback, ModelChecksum via node " << via;
    }
  }
}

}  // namespace
}  // namespace summon::tests
