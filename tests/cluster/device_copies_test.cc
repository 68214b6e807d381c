// Session copies in device memory (issue 13) across a cluster: a model whose
// shards live on a device gets its session copies there too, unless the
// session asks for offload_to_cpu. Two in-process nodes x two ranks over
// real gRPC and Gloo, shards "on a device" through the fake provider (heap
// memory reached only by copies, so every device path runs on a CPU), exact
// values from the seeded init, and the provider's live allocations showing
// where each copy went (the fake device puts each local rank on a GPU of its
// own, so every node holds a copy per GPU). Each test runs twice: with the
// copies' exchange between nodes on Gloo through host buffers, and on a device
// communicator (summond --gather-transport nccl), here Gloo over the fake
// device's memory standing in for NCCL and counting the collectives it carries.
// SUMMON_TEST_DEVICE=cuda runs the first on a GPU (the second needs a GPU
// per node).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_cluster.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/comm/communicator.h"
#include "server/comm/gloo_communicator.h"
#include "server/gpu/cuda_shard_memory.h"
#include "server/testing/fake_device_memory.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"

namespace summon::tests {
namespace {

using ::summon::client::SummonClient;

constexpr const char* kLayout = kUnevenLayout;
constexpr int kNodes = 2;
constexpr int kLocalRanks = 2;
constexpr uint64_t kEditSeed = 99;

// The bytes a fake device's IPC handle names ("fake-ipc:<device>:<address>",
// FakeDeviceMemoryProvider): this process's heap, where a real handle would
// be opened with cudaIpcOpenMemHandle in another process.
uint8_t* FakeDeviceBytes(const std::string& handle) {
  const std::string text = handle.substr(0, handle.find('\0'));
  const size_t colon = text.rfind(':');
  return reinterpret_cast<uint8_t*>(
      std::strtoull(text.c_str() + colon + 1, nullptr, 10));
}

// The shards' placement: the fake device by default, real GPU memory with
// SUMMON_TEST_DEVICE=cuda (tests/gpu/run_on_gpu.sh; every node and rank on
// the visible GPUs). Null with the reason set when no GPU is there.
std::shared_ptr<const server::ShardMemoryProvider> MakeProvider(
    std::shared_ptr<server::FakeDeviceMemoryProvider>* fake,
    std::string* unavailable) {
  const char* device = std::getenv("SUMMON_TEST_DEVICE");
  if (device == nullptr || std::string(device) != "cuda") {
    *fake = std::make_shared<server::FakeDeviceMemoryProvider>();
    return *fake;
  }
  absl::StatusOr<std::unique_ptr<server::gpu::CudaShardMemoryProvider>> cuda =
      server::gpu::CudaShardMemoryProvider::Create();
  if (!cuda.ok()) {
    *unavailable = cuda.status().ToString();
    return nullptr;
  }
  return std::shared_ptr<const server::ShardMemoryProvider>(*std::move(cuda));
}

// The device communicator of the DeviceExchange runs: Gloo over the fake
// device's heap bytes (ShardMemory::device_data) where NCCL would take GPU
// pointers, counting the collectives it carries.
class CountingCommunicator final : public server::Communicator {
 public:
  CountingCommunicator(std::unique_ptr<server::Communicator> inner,
                       std::atomic<int>* collectives)
      : inner_(std::move(inner)), collectives_(collectives) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllGatherV(const void* send, int64_t send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes_per_rank,
                          const server::CollectiveOptions& options) override {
    ++*collectives_;
    return inner_->AllGatherV(send, send_bytes, recv, recv_bytes_per_rank,
                              options);
  }
  absl::Status Gather(const void* send, int64_t send_bytes, void* recv,
                      const std::vector<int64_t>& recv_bytes_per_rank, int root,
                      const server::CollectiveOptions& options) override {
    ++*collectives_;
    return inner_->Gather(send, send_bytes, recv, recv_bytes_per_rank, root,
                          options);
  }
  absl::Status Scatter(const void* send,
                       const std::vector<int64_t>& send_bytes_per_rank,
                       void* recv, int64_t recv_bytes, int root,
                       const server::CollectiveOptions& options) override {
    ++*collectives_;
    return inner_->Scatter(send, send_bytes_per_rank, recv, recv_bytes, root,
                           options);
  }
  absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                         const server::CollectiveOptions& options) override {
    ++*collectives_;
    return inner_->Broadcast(buffer, bytes, root, options);
  }
  absl::Status Barrier(const server::CollectiveOptions& options) override {
    return inner_->Barrier(options);
  }
  void Abort() override { inner_->Abort(); }

 private:
  const std::unique_ptr<server::Communicator> inner_;
  std::atomic<int>* const collectives_;
};

server::DeviceCommunicatorFactory GlooOverDeviceMemory(
    std::atomic<int>* collectives) {
  return [collectives](int rank, int size, absl::Duration timeout,
                       gloo::rendezvous::Store& store)
             -> absl::StatusOr<std::unique_ptr<server::Communicator>> {
    server::GlooCommunicator::Spec spec;
    spec.rank = rank;
    spec.size = size;
    spec.connect_timeout = timeout;
    absl::StatusOr<std::unique_ptr<server::GlooCommunicator>> gloo =
        server::GlooCommunicator::Create(spec, store);
    if (!gloo.ok()) return gloo.status();
    return std::unique_ptr<server::Communicator>(
        std::make_unique<CountingCommunicator>(*std::move(gloo), collectives));
  };
}

struct GlooThroughHost {
  static constexpr bool kDeviceExchange = false;
};
struct DeviceExchange {
  static constexpr bool kDeviceExchange = true;
};

template <typename Transport>
class DeviceCopiesTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string();
    fake_ = new std::shared_ptr<server::FakeDeviceMemoryProvider>();
    const std::shared_ptr<const server::ShardMemoryProvider> provider =
        MakeProvider(fake_, skip_reason_);
    if (provider == nullptr) return;
    if (Transport::kDeviceExchange && *fake_ == nullptr) {
      *skip_reason_ = "a device exchange between two nodes needs two GPUs";
      return;
    }
    bench::BenchCluster::Options options;
    options.nodes = kNodes;
    options.local_ranks = kLocalRanks;
    options.device = provider;
    if (Transport::kDeviceExchange) {
      options.device_communicator = GlooOverDeviceMemory(&collectives_);
    }
    absl::StatusOr<std::unique_ptr<bench::BenchCluster>> started =
        bench::BenchCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = started->release();
    clients_ = new std::vector<SummonClient>();
    for (int n = 0; n < kNodes; ++n) {
      clients_->emplace_back(grpc::CreateChannel(
          cluster_->target(n), grpc::InsecureChannelCredentials()));
    }
  }
  static void TearDownTestSuite() {
    delete clients_;
    delete cluster_;
    delete fake_;
    delete skip_reason_;
    clients_ = nullptr;
    cluster_ = nullptr;
    fake_ = nullptr;
    skip_reason_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_->empty()) GTEST_SKIP() << *skip_reason_;
    ASSERT_NE(cluster_, nullptr);
    collectives_before_ = collectives_.load();
  }

  const SummonClient& node(int n) const { return (*clients_)[n]; }
  // Device allocations alive on every node together (shards, staging and
  // session copies); 0 on a real GPU, where only the fake device counts.
  int64_t live() const { return *fake_ ? (*fake_)->live_allocations() : 0; }
  // With the fake device: exactly `copies` allocations more than `before`.
  void ExpectDeviceCopies(int64_t before, int64_t copies) const {
    if (*fake_) {
      EXPECT_EQ(live(), before + copies);
    }
  }
  // With the fake device: back to `before` within a few seconds (a close
  // answers once the leader decided; peers free their copies right after).
  void ExpectDeviceCopiesFreed(int64_t before) const {
    if (!*fake_) return;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (live() != before && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(live(), before);
  }
  // The collectives the device communicator carried in this test, summed
  // over the nodes: `gathers` on every node under a device exchange, none
  // otherwise.
  void ExpectDeviceCollectives(int gathers) const {
    EXPECT_EQ(collectives_.load() - collectives_before_,
              Transport::kDeviceExchange ? gathers * kNodes : 0);
  }

  // Every primary parameter read through `n` equals `values`.
  void ExpectReads(int n, const std::string& session, const TensorBytes& values,
                   bool grad = false) {
    for (const auto& [fqn, bytes] : values) {
      SCOPED_TRACE(absl::StrCat(fqn, " through node ", n));
      EXPECT_EQ(ReadOk(node(n), session, fqn, grad), bytes);
    }
  }

  static inline std::shared_ptr<server::FakeDeviceMemoryProvider>* fake_ =
      nullptr;
  static inline std::string* skip_reason_ = nullptr;
  static inline bench::BenchCluster* cluster_ = nullptr;
  static inline std::vector<SummonClient>* clients_ = nullptr;
  static inline std::atomic<int> collectives_{0};
  int collectives_before_ = 0;
};

using Transports = testing::Types<GlooThroughHost, DeviceExchange>;
TYPED_TEST_SUITE(DeviceCopiesTest, Transports);

TYPED_TEST(DeviceCopiesTest, ReadOnlySessionGathersIntoACopyOnEveryGpu) {
  for (v1::ShardingStrategy strategy :
       {v1::SHARDING_STRATEGY_FULL_SHARD, v1::SHARDING_STRATEGY_HYBRID_SHARD}) {
    SCOPED_TRACE(v1::ShardingStrategy_Name(strategy));
    const std::string name = absl::StrCat("read-", strategy);
    const v1::Model model =
        CreateSeeded(this->node(0), name, kLayout, strategy);
    const int64_t shards = this->live();
    const v1::Session session = OpenOk(this->node(0), name, ReadOnly());
    // A copy of the whole model on every GPU of both nodes (the fake
    // device puts each local rank on a GPU of its own).
    this->ExpectDeviceCopies(shards, kNodes * kLocalRanks);
    for (int n = 0; n < kNodes; ++n)
      this->ExpectReads(n, session.id(), SeededModel(model));
    // Converted reads come through the host chunk by chunk.
    EXPECT_EQ(ReadOk(this->node(1), session.id(), "layers.1.w", false,
                     v1::DTYPE_BFLOAT16),
              SeededBytes("layers.1.w", 35, v1::DTYPE_BFLOAT16));
    CloseOk(this->node(0), session.id());
    this->ExpectDeviceCopiesFreed(shards);
    EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), name)),
              ExpectedChecksums(model, SeededModel(model)));
  }
  this->ExpectDeviceCollectives(2);
}

TYPED_TEST(DeviceCopiesTest, Rank0OnlyHoldsOneDeviceCopyOnTheHomeRanksNode) {
  const v1::Model model = CreateSeeded(this->node(0), "home", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const int64_t shards = this->live();
  const v1::Session session =
      OpenOk(this->node(0), "home", Rank0Only(3, ReadOnly()));
  this->ExpectDeviceCopies(shards, 1);
  // Node 0 holds none: its reads are served from node 1's copy.
  for (int n = 0; n < kNodes; ++n)
    this->ExpectReads(n, session.id(), SeededModel(model));
  CloseOk(this->node(0), session.id());
  this->ExpectDeviceCopiesFreed(shards);
  this->ExpectDeviceCollectives(1);  // Gather to the home.
}

TYPED_TEST(DeviceCopiesTest, OffloadToCpuKeepsTheCopiesInHostMemory) {
  const v1::Model model = CreateSeeded(this->node(0), "offload", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const int64_t shards = this->live();
  v1::SessionOptions options = ReadOnly();
  options.set_offload_to_cpu(true);
  const v1::Session session = OpenOk(this->node(0), "offload", options);
  this->ExpectDeviceCopiesFreed(shards);
  for (int n = 0; n < kNodes; ++n)
    this->ExpectReads(n, session.id(), SeededModel(model));
  CloseOk(this->node(0), session.id());
  this->ExpectDeviceCollectives(0);  // Host copies exchange over Gloo.
}

// Writebacks leave spare staged allocations behind for a while
// (StagingPool, --staging-pool-idle), so they run on a cluster of their own,
// after the suite above has counted its allocations.
template <typename Transport>
class DeviceCopiesWritebackTest : public DeviceCopiesTest<Transport> {};
TYPED_TEST_SUITE(DeviceCopiesWritebackTest, Transports);

// Edits land in the device copies of both nodes; the writeback stages each
// rank's slices device to device (rank0_only: scattered from the home's
// device copy through the host) and commits them on every rank.
TYPED_TEST(DeviceCopiesWritebackTest,
           WritebackFromDeviceCopiesReachesEveryRank) {
  for (bool rank0_only : {false, true}) {
    SCOPED_TRACE(rank0_only ? "rank0_only, home rank 3" : "one copy per node");
    const std::string name = absl::StrCat("write-", rank0_only);
    const v1::Model model = CreateSeeded(this->node(0), name, kLayout,
                                         v1::SHARDING_STRATEGY_FULL_SHARD);
    const v1::Session session = OpenOk(
        this->node(0), name, rank0_only ? Rank0Only(3) : v1::SessionOptions());
    TensorBytes edited;
    for (const auto& [fqn, numel] : PrimaryParams(model)) {
      edited[fqn] = SeededBytes(fqn, numel, v1::DTYPE_FLOAT32, kEditSeed);
      WriteOk(this->node(static_cast<int>(edited.size()) % kNodes),
              session.id(), fqn, edited[fqn]);
    }
    for (int n = 0; n < kNodes; ++n) this->ExpectReads(n, session.id(), edited);
    CloseOk(this->node(1), session.id());
    EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), name)),
              ExpectedChecksums(model, edited));
    const v1::Session after = OpenOk(this->node(1), name, ReadOnly());
    this->ExpectReads(0, after.id(), edited);
    CloseOk(this->node(1), after.id());
  }
  // Four gathers; a rank0_only writeback's scatter from the home stays on
  // Gloo through host buffers.
  this->ExpectDeviceCollectives(4);
}

// A writable session's device copies can be mapped too: WriteTensor lands
// in every GPU's copy, and the writeback takes each rank's slices from the
// copy on that rank's GPU (as FSDP writes each rank's chunk back from its own
// unsharded parameters), so an edit made in one GPU's copy reaches exactly
// the ranks on that GPU.
TYPED_TEST(DeviceCopiesWritebackTest,
           WritebackTakesEachRanksSlicesFromTheCopyOnItsGpu) {
  if (!*this->fake_) {
    GTEST_SKIP() << "a copy is edited through its IPC handle in-process, "
                    "which only the fake device allows";
  }
  const v1::Model model = CreateSeeded(this->node(0), "per-gpu", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const v1::Session session =
      OpenOk(this->node(0), "per-gpu", v1::SessionOptions());
  const std::string written =
      SeededBytes("norm.w", 6, v1::DTYPE_FLOAT32, kEditSeed);
  WriteOk(this->node(1), session.id(), "norm.w", written);

  absl::StatusOr<v1::MapSessionResponse> grant =
      this->node(0).GrantMapSession(session.id());
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(grant->device_copies_size(), kLocalRanks);
  std::map<std::string, uint64_t> offset_of;
  for (const v1::MappedTensor& tensor : grant->tensors()) {
    offset_of[tensor.info().fqn()] = tensor.byte_offset();
  }
  for (const v1::DeviceCopy& copy : grant->device_copies()) {
    SCOPED_TRACE(absl::StrCat("device ", copy.device()));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(
                              FakeDeviceBytes(copy.ipc_handle()) +
                              offset_of.at("norm.w")),
                          written.size()),
              written);
  }
  // The whole of layers.1.w edited in the copy on rank 1's GPU only.
  const std::string edit =
      SeededBytes("layers.1.w", 35, v1::DTYPE_FLOAT32, kEditSeed + 1);
  ASSERT_EQ(grant->device_copies(1).ranks(0), 1);
  std::memcpy(FakeDeviceBytes(grant->device_copies(1).ipc_handle()) +
                  offset_of.at("layers.1.w"),
              edit.data(), edit.size());
  CloseOk(this->node(0), session.id());

  std::vector<float> expected = SeededFloats("layers.1.w", 35);
  const std::vector<float> edited = BytesToFloats(edit);
  int taken = 0;
  for (int64_t i = 0; i < 35; ++i) {
    if (OwningPosition(model, "layers.1.w", i) != 1) continue;
    expected[i] = edited[i];
    ++taken;
  }
  ASSERT_GT(taken, 0);
  TensorBytes after = SeededModel(model);
  after["norm.w"] = written;
  after["layers.1.w"] = FloatBytes(expected);
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), "per-gpu")),
            ExpectedChecksums(model, after));
  const v1::Session reopened = OpenOk(this->node(1), "per-gpu", ReadOnly());
  this->ExpectReads(1, reopened.id(), after);
  CloseOk(this->node(1), reopened.id());
}

TYPED_TEST(DeviceCopiesTest,
           GradientsGatherIntoDeviceCopiesWithZerosWhereNone) {
  const v1::Model model = CreateSeeded(this->node(0), "grads", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD,
                                       std::vector<int32_t>{0, 3});
  const int64_t shards = this->live();
  v1::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  const v1::Session session = OpenOk(this->node(0), "grads", options);
  // Params and grads on every GPU.
  this->ExpectDeviceCopies(shards, 2 * kNodes * kLocalRanks);
  const TensorBytes seeded = SeededGrads(model);
  for (const auto& [fqn, numel] : PrimaryParams(model)) {
    // Ranks 1 and 2 hold no gradients: their slices read as zeros.
    std::vector<float> expected = BytesToFloats(seeded.at(fqn));
    for (int64_t i = 0; i < numel; ++i) {
      const int rank = OwningPosition(model, fqn, i);
      if (rank == 1 || rank == 2) expected[i] = 0.0f;
    }
    for (int n = 0; n < kNodes; ++n) {
      SCOPED_TRACE(absl::StrCat(fqn, " grad through node ", n));
      EXPECT_EQ(ReadOk(this->node(n), session.id(), fqn, /*grad=*/true),
                FloatBytes(expected));
    }
  }
  CloseOk(this->node(0), session.id());
  this->ExpectDeviceCopiesFreed(shards);
  this->ExpectDeviceCollectives(1);
}

// Statistics of a device copy are computed where it is; they equal the
// seeded values' and those of a host copy of the same tensor.
TYPED_TEST(DeviceCopiesTest, StatsOfADeviceCopyMatchTheHostCopy) {
  const v1::Model model = CreateSeeded(this->node(0), "stats", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const v1::Session on_device = OpenOk(this->node(0), "stats", ReadOnly());
  v1::SessionOptions offload = ReadOnly();
  offload.set_offload_to_cpu(true);
  const v1::Session on_host = OpenOk(this->node(0), "stats", offload);
  for (int n = 0; n < kNodes; ++n) {
    absl::StatusOr<v1::TensorStatsResponse> device_stats =
        this->node(n).TensorStats(on_device.id(), {"layers.0.attn.w"}, false,
                                  8);
    absl::StatusOr<v1::TensorStatsResponse> host_stats =
        this->node(n).TensorStats(on_host.id(), {"layers.0.attn.w"}, false, 8);
    ASSERT_TRUE(device_stats.ok()) << device_stats.status();
    ASSERT_TRUE(host_stats.ok()) << host_stats.status();
    const std::vector<float> values = SeededFloats("layers.0.attn.w", 25);
    const v1::TensorStats& stats = device_stats->tensors(0);
    EXPECT_EQ(stats.min(), *std::min_element(values.begin(), values.end()));
    EXPECT_EQ(stats.max(), *std::max_element(values.begin(), values.end()));
    EXPECT_EQ(stats.histogram().counts_size(), 8);
    // The same numbers as the host's, the sums up to their order (a GPU
    // adds in another order than the CPU).
    const v1::TensorStats& host = host_stats->tensors(0);
    EXPECT_EQ(stats.min(), host.min());
    EXPECT_EQ(stats.max(), host.max());
    EXPECT_EQ(stats.nan_count(), host.nan_count());
    EXPECT_EQ(stats.inf_count(), host.inf_count());
    EXPECT_EQ(stats.histogram().SerializeAsString(),
              host.histogram().SerializeAsString());
    EXPECT_NEAR(stats.mean(), host.mean(), 1e-12 * std::abs(host.mean()));
    EXPECT_NEAR(stats.l2_norm(), host.l2_norm(), 1e-12 * host.l2_norm());
  }
  CloseOk(this->node(0), on_device.id());
  CloseOk(this->node(0), on_host.id());
  this->ExpectDeviceCollectives(1);
}

// MapSession hands a device copy out as each GPU's CUDA IPC handle, for
// writable sessions too; a host mapping (MappedSession) is refused with the
// way out, and a gather whose device copies went out is not shared with
// later opens (a mapper can write into device memory).
TYPED_TEST(DeviceCopiesTest, MapSessionHandsOutTheCopyOnEveryGpu) {
  const v1::Model model = CreateSeeded(this->node(0), "map", kLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const int64_t shards = this->live();
  const v1::Session first = OpenOk(this->node(0), "map", ReadOnly());
  const v1::Session shared = OpenOk(this->node(0), "map", ReadOnly());
  this->ExpectDeviceCopies(shards, kNodes * kLocalRanks);  // One gather.

  absl::StatusOr<client::MappedSession> on_host =
      this->node(0).MapSession(first.id());
  ASSERT_FALSE(on_host.ok());
  EXPECT_EQ(on_host.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(on_host.status().message().find("offload_to_cpu"),
            std::string::npos)
      << on_host.status();

  absl::StatusOr<v1::MapSessionResponse> grant =
      this->node(0).GrantMapSession(first.id());
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_TRUE(grant->socket().empty());
  EXPECT_TRUE(grant->token().empty());
  // One copy per GPU, listing node 0's ranks on it (ranks 0 and 1 between
  // them); the fake device puts each rank on a GPU of its own.
  std::vector<int32_t> ranks;
  std::vector<int32_t> devices;
  for (const v1::DeviceCopy& copy : grant->device_copies()) {
    EXPECT_EQ(copy.ipc_handle().size(), 64u);
    ranks.insert(ranks.end(), copy.ranks().begin(), copy.ranks().end());
    devices.push_back(copy.device());
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(std::is_sorted(devices.begin(), devices.end()) &&
              std::adjacent_find(devices.begin(), devices.end()) ==
                  devices.end());
  if (*this->fake_) {  // A real handle opens only in another process.
    ASSERT_EQ(grant->device_copies_size(), kLocalRanks);
    for (int local = 0; local < kLocalRanks; ++local) {
      const v1::DeviceCopy& copy = grant->device_copies(local);
      EXPECT_EQ(copy.device(), local);
      ASSERT_EQ(copy.ranks_size(), 1);
      EXPECT_EQ(copy.ranks(0), local);
      const uint8_t* bytes = FakeDeviceBytes(copy.ipc_handle());
      for (const v1::MappedTensor& tensor : grant->tensors()) {
        SCOPED_TRACE(absl::StrCat(tensor.info().fqn(), " on device ", local));
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes) +
                                  tensor.byte_offset(),
                              static_cast<size_t>(tensor.info().numel() * 4)),
                  SeededBytes(tensor.info().fqn(), tensor.info().numel(),
                              v1::DTYPE_FLOAT32));
      }
    }
  }
  // The next read-only open gathers copies of its own.
  const v1::Session later = OpenOk(this->node(0), "map", ReadOnly());
  this->ExpectDeviceCopies(shards, 2 * kNodes * kLocalRanks);
  this->ExpectReads(1, later.id(), SeededModel(model));
  for (const v1::Session& session : {first, shared, later}) {
    CloseOk(this->node(0), session.id());
  }
  this->ExpectDeviceCopiesFreed(shards);
}

}  // namespace
}  // namespace summon::tests
