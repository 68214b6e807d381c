// Device placement end to end (SUMMON_TEST_DEVICE=fake on CPU machines,
// =cuda on a GPU): the shards live in device memory, the shared-memory
// segments keep only their headers, MapShards hands out the device and IPC
// handles, and a daemon restart, which cannot keep device memory, brings the
// model back MISSING_SHARDS until a checkpoint refills it.
#include <sys/stat.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

class DevicePlacementTest : public SummondTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartServer(2));
    if (spec_.device == nullptr) {
      GTEST_SKIP() << "runs with SUMMON_TEST_DEVICE=fake or cuda";
    }
  }

};

TEST_F(DevicePlacementTest, MapShardsHandsOutTheDeviceAllocation) {
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kBlocksLayout,
               std::vector<int>{1});
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    const pb::MapShardsResponse shards = MapShards("m", rank);
    ASSERT_TRUE(shards.has_device_ordinal());
    EXPECT_GE(shards.device_ordinal(), 0);
    EXPECT_EQ(shards.params_ipc_handle().size(), 64u);
    EXPECT_EQ(shards.grads_ipc_handle().size(), rank == 1 ? 64u : 0u);
    // The segment is its 4 KiB header alone; the bytes are on the device,
    // at the offsets the units name.
    EXPECT_EQ(shards.segment_bytes(), 4096u);
    struct stat info;
    ASSERT_EQ(stat(("/dev/shm" + shards.segment_name()).c_str(), &info), 0);
    EXPECT_EQ(info.st_size, 4096);
    ASSERT_EQ(shards.units_size(), 3);
    const pb::UnitShard& last = shards.units(2);
    EXPECT_GE(shards.device_bytes(),
              last.params_offset() + uint64_t(last.chunk_numel()) * 4);
  }
  // Distinct allocations per rank.
  EXPECT_NE(MapShards("m", 0).params_ipc_handle(),
            MapShards("m", 1).params_ipc_handle());
}

TEST_F(DevicePlacementTest, RestartLeavesMissingShardsUntilALoadRefillsThem) {
  const pb::Model model = CreateSeeded("m");
  const uint64_t incarnation = MapShards("m", 0).incarnation();
  EXPECT_EQ(ParamChecksums(Checksum("m")),
            ExpectedChecksums(model, SeededBlocks()));
  {
    pb::SaveModelRequest request;
    request.set_model("m");
    request.set_path("m.safetensors");
    pb::SaveModelResponse response;
    grpc::ClientContext context;
    const grpc::Status status =
        summon_->SaveModel(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  ASSERT_NO_FATAL_FAILURE(RestartServer());
  const pb::Model missing = Describe("m");
  EXPECT_EQ(missing.state(), pb::MODEL_STATE_MISSING_SHARDS);
  EXPECT_NE(missing.state_detail().find("GPU memory"), std::string::npos)
      << missing.state_detail();
  pb::Session session;
  EXPECT_CODE(TryOpen("m", ReadOnly(), &session), FAILED_PRECONDITION);

  {
    pb::LoadModelRequest request;
    request.set_model("m");
    request.set_path("m.safetensors");
    pb::LoadModelResponse response;
    grpc::ClientContext context;
    const grpc::Status status =
        summon_->LoadModel(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(Describe("m").state(), pb::MODEL_STATE_READY);
  EXPECT_EQ(ParamChecksums(Checksum("m")),
            ExpectedChecksums(model, SeededBlocks()));
  // A trainer that mapped the old allocation sees the model changed.
  EXPECT_NE(MapShards("m", 0).incarnation(), incarnation);
  const pb::Session reopened = Open("m", ReadOnly(ModuleScope("layers.1")));
  EXPECT_EQ(Read(reopened.id(), "layers.1.w"), Seeded("layers.1.w", 35));
  Close(reopened.id());
}

}  // namespace
}  // namespace summon::tests
