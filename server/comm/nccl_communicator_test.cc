#include "server/comm/nccl_communicator.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "cuda_runtime.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "server/testing/comm_patterns.h"

namespace summon::server {
namespace {

int CudaDevices() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
}

const CollectiveOptions kOptions{/*tag=*/1, /*timeout=*/absl::Seconds(5)};

TEST(NcclCommunicatorTest, InvalidSpecIsRefused) {
  gloo::rendezvous::HashStore store;
  EXPECT_EQ(NcclCommunicator::Create({1, 1, 0, absl::Seconds(1)}, store)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create({0, 1, 0, absl::ZeroDuration()}, store)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, CreateWithoutAGpuIsUnavailable) {
  if (CudaDevices() > 0) GTEST_SKIP() << "this machine has a GPU";
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create({0, 1, 0, absl::Seconds(1)}, store);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable)
      << comm.status();
}

// Bytes in one GPU's memory, filled from and read back to the host.
class DeviceBytes {
 public:
  DeviceBytes(int device, const std::vector<uint8_t>& host)
      : device_(device), size_(host.size()) {
    cudaSetDevice(device_);
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(size_, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), size_, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }
  void* get() { return ptr_; }
  std::vector<uint8_t> ToHost() const {
    std::vector<uint8_t> host(size_);
    cudaSetDevice(device_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, size_, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  const int device_;
  const size_t size_;
  void* ptr_ = nullptr;
};

// One rank per GPU (at most 4), every collective, exact bytes. Skipped on
// machines without a GPU; this is what a GPU machine verifies.
TEST(NcclCommunicatorTest, CollectivesOnEveryGpu) {
  const int size = std::min(CudaDevices(), 4);
  if (size == 0) GTEST_SKIP() << "no GPU";
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<NcclCommunicator>> comms(size);
  RunOnRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::Create({rank, size, rank, absl::Seconds(30)}, store);
    ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
    comms[rank] = *std::move(comm);
  });
  for (int rank = 0; rank < size; ++rank) ASSERT_NE(comms[rank], nullptr);

  const std::vector<int64_t> all = {17, 0, 300001, 1};
  const std::vector<int64_t> bytes(all.begin(), all.begin() + size);
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  std::vector<uint8_t> concatenated;
  for (int r = 0; r < size; ++r) {
    const std::vector<uint8_t> part = Pattern(r, bytes[r]);
    concatenated.insert(concatenated.end(), part.begin(), part.end());
  }
  const int root = size - 1;

  RunOnRanks(size, [&](int rank) {
    NcclCommunicator& comm = *comms[rank];
    DeviceBytes send(rank, Pattern(rank, bytes[rank]));
    DeviceBytes gathered(rank, std::vector<uint8_t>(total, 0xEE));
    ASSERT_TRUE(comm.AllGatherV(send.get(), bytes[rank], gathered.get(), bytes,
                                kOptions)
                    .ok());
    EXPECT_EQ(gathered.ToHost(), concatenated) << "allgatherv rank " << rank;

    DeviceBytes at_root(rank, std::vector<uint8_t>(total, 0xEE));
    ASSERT_TRUE(comm.Gather(send.get(), bytes[rank], at_root.get(), bytes, root,
                            kOptions)
                    .ok());
    if (rank == root) {
      EXPECT_EQ(at_root.ToHost(), concatenated) << "gather";
    }

    DeviceBytes source(rank, concatenated);
    DeviceBytes slice(rank, std::vector<uint8_t>(bytes[rank], 0xEE));
    ASSERT_TRUE(comm.Scatter(source.get(), bytes, slice.get(), bytes[rank],
                             root, kOptions)
                    .ok());
    EXPECT_EQ(slice.ToHost(), Pattern(rank, bytes[rank]))
        << "scatter rank " << rank;

    DeviceBytes broadcast(rank, rank == root
                                    ? Pattern(root, 4096)
                                    : std::vector<uint8_t>(4096, 0xEE));
    ASSERT_TRUE(comm.Broadcast(broadcast.get(), 4096, root, kOptions).ok());
    EXPECT_EQ(broadcast.ToHost(), Pattern(root, 4096))
        << "broadcast rank " << rank;

    EXPECT_TRUE(comm.Barrier(kOptions).ok()) << "barrier rank " << rank;
  });

  // Aborted: every later operation is refused.
  comms[0]->Abort();
  EXPECT_EQ(comms[0]->Barrier(kOptions).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace summon::server
