#ifndef SUMMON_TESTS_INTEGRATION_SUMMOND_FIXTURE_H_
#define SUMMON_TESTS_INTEGRATION_SUMMOND_FIXTURE_H_

// A real summond (SummonServer::Start on port 0 with its own data directory)
// and gRPC helpers for the integration tests. Tests talk to the daemon only
// through the Summon and Trainer stubs; expected values come from the seeded
// init (docs/design.md#seeded-init), recomputed here.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "summon/v1/summon.grpc.pb.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace summon::tests {

namespace pb = ::summon::v1;
using ::summon::server::SummonServer;

inline constexpr uint64_t kSeed = 7;
inline constexpr uint64_t kGradSeed = 11;

// Root unit (embedding, tied head, a norm), two block units. With 4 ranks
// every unit is split unevenly, so slices cross rank boundaries. The module
// "layers.0.attn" is not a unit.
inline constexpr char kBlocksLayout[] = R"({"strategy": "FULL_SHARD",
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"},
      {"fqn": "norm.w", "shape": [10], "dtype": "float32"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.attn.w", "shape": [5, 5], "dtype": "float32"},
      {"fqn": "layers.0.attn.b", "shape": [5], "dtype": "float32"},
      {"fqn": "layers.0.mlp.w", "shape": [3, 5], "dtype": "float32"}]},
    {"fqn": "layers.1", "params": [
      {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";

// Primary parameters of kBlocksLayout with their element counts, model order.
inline const std::vector<std::pair<std::string, int64_t>> kBlocksParams = {
    {"embed.w", 40},        {"norm.w", 10},         {"layers.0.attn.w", 25},
    {"layers.0.attn.b", 5}, {"layers.0.mlp.w", 15}, {"layers.1.w", 35}};
inline constexpr int64_t kBlocksNumel = 130;

// Full float32 values per primary parameter FQN.
using TensorValues = std::map<std::string, std::vector<float>>;

// Elements [0, numel) of `fqn` under the seeded init.
std::vector<float> Seeded(const std::string& fqn, int64_t numel,
                          uint64_t seed = kSeed);
// Every parameter of kBlocksLayout under the seeded init.
TensorValues SeededBlocks(uint64_t seed = kSeed);
std::vector<float> Scaled(std::vector<float> values, float factor);
// The little-endian bytes of `values`.
std::string FloatBytes(const std::vector<float>& values);

// ShardChecksum.params (or .grads) keyed by (rank, unit).
using ChecksumMap = std::map<std::pair<int, std::string>, uint64_t>;
ChecksumMap ParamChecksums(const pb::ModelChecksumResponse& response);
ChecksumMap GradChecksums(const pb::ModelChecksumResponse& response);
// What ModelChecksum must report for `model` (as DescribeModel returns it)
// when its full tensors hold `values` (float32 units only): every rank's
// shard rebuilt from the layout, padding zero. `ranks` limits the ranks
// (gradients exist on some only); empty: every rank.
ChecksumMap ExpectedChecksums(const pb::Model& model,
                              const TensorValues& values,
                              const std::vector<int>& ranks = {});
// The global rank owning element `index` of parameter `fqn` of a sharded
// model (position = rank when the group spans the node).
int OwnerOf(const pb::Model& model, const std::string& fqn, int64_t index);

// Session.bytes of one copy of float32 tensors of these element counts: the
// session buffer starts every tensor at a 64-byte boundary (core/plan.h).
int64_t SessionBufferBytes(const std::vector<int64_t>& numels);

// Session option builders.
pb::SessionOptions ModuleScope(const std::string& fqn, bool recurse = true);
pb::SessionOptions ParamScope(const std::vector<std::string>& fqns);
pb::SessionOptions ReadOnly(pb::SessionOptions options = {});

// Asserts a gRPC status code, printing the message on mismatch.
#define EXPECT_CODE(status, code)                            \
  EXPECT_EQ((status).error_code(), ::grpc::StatusCode::code) \
      << "got " << (status).error_code() << ": " << (status).error_message()

class SummondTest : public ::testing::Test {
 protected:
  // Starts summond with `local_ranks` ranks on a fresh data directory. Its
  // shards are placed per $SUMMON_TEST_DEVICE: cpu (default, shared
  // memory), fake (server::FakeDeviceMemoryProvider: the device code paths
  // on a CPU) or cuda (device memory; the test skips without a GPU).
  void StartServer(int local_ranks = 4, int64_t memory_budget_bytes = 0,
                   absl::Duration reaper_interval = absl::Milliseconds(50));
  // Shuts the daemon down and starts a new one on the same data directory
  // (shards stay in shared memory), reconnecting the stubs.
  void RestartServer();
  // Sets spec_.device per $SUMMON_TEST_DEVICE (see StartServer).
  void PlaceShards();
  // Shuts down, unlinks every shared-memory segment of the data directory's
  // instance and removes the directory.
  void TearDown() override;

  // CreateModel with seeded parameters; `grad_ranks` set: seeded gradients
  // (kGradSeed) on those ranks (empty vector: every rank).
  pb::Model CreateSeeded(
      const std::string& name,
      pb::ShardingStrategy strategy = pb::SHARDING_STRATEGY_FULL_SHARD,
      const std::string& layout = kBlocksLayout,
      std::optional<std::vector<int>> grad_ranks = std::nullopt);
  pb::Model Describe(const std::string& model);
  pb::ModelChecksumResponse Checksum(const std::string& model);
  // MapShards for a local rank; a failed call fails the test.
  pb::MapShardsResponse MapShards(const std::string& model, int rank);

  grpc::Status TryOpen(const std::string& model,
                       const pb::SessionOptions& options, pb::Session* session);
  // Opens or fails the test; returns the session (empty id on failure).
  pb::Session Open(const std::string& model,
                   const pb::SessionOptions& options = {});
  grpc::Status TryClose(const std::string& id, bool abort, bool force,
                        pb::CloseSessionResponse* response);
  pb::CloseSessionResponse Close(const std::string& id);

  // ReadTensor of a whole tensor as raw bytes; `info` gets the first chunk's.
  grpc::Status ReadRaw(const pb::ReadTensorRequest& request, std::string* data,
                       pb::TensorInfo* info = nullptr);
  // The whole float32 tensor (the parameter or its gradient).
  std::vector<float> Read(const std::string& session, const std::string& fqn,
                          bool grad = false);
  // One WriteTensor stream: the header, then one message per `data` entry.
  grpc::Status Write(const pb::WriteTensorHeader& header,
                     const std::vector<std::string>& data);
  // Writes float32 `values` from element `offset`, declaring their count.
  grpc::Status WriteFloats(const std::string& session, const std::string& fqn,
                           const std::vector<float>& values, bool grad = false,
                           int64_t offset = 0);

  grpc::Status ReportPhase(const std::string& model, int rank,
                           pb::TrainingPhase phase,
                           std::optional<uint32_t> deadline_ms = std::nullopt,
                           pb::ReportPhaseResponse* response = nullptr);
  // Reports each of `phases` in turn for `rank` (with `step` when given);
  // the first failure.
  grpc::Status WalkPhases(const std::string& model, int rank,
                          const std::vector<pb::TrainingPhase>& phases,
                          std::optional<int64_t> step = std::nullopt,
                          const std::string& lease_id = "");
  // IDLE -> FORWARD -> BETWEEN -> BACKWARD -> OPTIMIZER -> IDLE.
  static const std::vector<pb::TrainingPhase>& FullStep();

  std::string data_dir_;
  // ReadSlices' cuda_buffer destinations for the next StartServer (a fake
  // in tests; null: such reads are refused).
  std::shared_ptr<server::DeviceSliceDestinations> slice_devices_;
  SummonServer::Spec spec_;
  std::unique_ptr<SummonServer> server_;
  std::unique_ptr<pb::Summon::Stub> summon_;
  std::unique_ptr<pb::Trainer::Stub> trainer_;

 private:
  void Connect();
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_INTEGRATION_SUMMOND_FIXTURE_H_
