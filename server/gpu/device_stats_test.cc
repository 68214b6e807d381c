// Device statistics against the CPU version on the same seeded values. The
// checks that need a GPU skip, printing why, where none is visible; the
// argument checks and the availability probe run everywhere.
#include "server/gpu/device_stats.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/seeded_init.h"
#include "core/tensor_stats.h"
#include "gtest/gtest.h"

namespace summon::server::gpu {
namespace {

TEST(CudaDeviceAvailableTest, SaysWhyWhenThereIsNoDevice) {
  const absl::Status available = CudaDeviceAvailable();
  if (available.ok()) {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    EXPECT_GT(count, 0);
  } else {
    EXPECT_EQ(available.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(available.message().empty());
    std::printf("no GPU here: %s\n", std::string(available.message()).c_str());
  }
}

TEST(DeviceStatsTest, RefusesWhatTheCpuVersionRefuses) {
  // Checked before any device memory is touched, so no GPU is needed.
  EXPECT_EQ(ComputeDeviceTensorStatistics(core::DType::kInt32, nullptr, 4, 8)
                .status()
                .message(),
            "statistics need a floating-point tensor, not int32");
  EXPECT_EQ(
      ComputeDeviceTensorStatistics(core::DType::kFloat32, nullptr, 4, 4097)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

class DeviceStatsOnGpuTest : public testing::TestWithParam<core::DType> {
 protected:
  void SetUp() override {
    const absl::Status available = CudaDeviceAvailable();
    if (!available.ok()) {
      GTEST_SKIP() << "needs a CUDA device: " << available.message();
    }
  }
};

TEST_P(DeviceStatsOnGpuTest, MatchesTheCpuOnSeededValuesWithNanAndInf) {
  const core::DType dtype = GetParam();
  const int64_t numel = (int64_t{1} << 20) + 17;  // not a whole block
  const size_t bytes = core::ElementSize(dtype) * static_cast<size_t>(numel);
  std::vector<uint8_t> host(bytes);
  ASSERT_TRUE(core::FillSeeded("w", 7, dtype, 0, numel, host.data()).ok());
  // Plant non-finite values at known places (as float32 or float64).
  if (dtype == core::DType::kFloat32 || dtype == core::DType::kFloat64) {
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(core::ConvertElements(
                      core::DType::kFloat64, &specials[i], dtype,
                      host.data() + (1000 * (i + 1)) * core::ElementSize(dtype),
                      1)
                      .ok());
    }
  }
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  for (int bins : {0, 1, 16, 4096}) {
    SCOPED_TRACE(bins);
    absl::StatusOr<core::TensorStatistics> cpu =
        core::ComputeTensorStatistics(dtype, host.data(), numel, bins);
    absl::StatusOr<core::TensorStatistics> gpu =
        ComputeDeviceTensorStatistics(dtype, device, numel, bins);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(gpu->numel, cpu->numel);
    EXPECT_EQ(gpu->finite_count, cpu->finite_count);
    EXPECT_EQ(gpu->nan_count, cpu->nan_count);
    EXPECT_EQ(gpu->inf_count, cpu->inf_count);
    EXPECT_EQ(gpu->min, cpu->min);
    EXPECT_EQ(gpu->max, cpu->max);
    EXPECT_NEAR(gpu->mean, cpu->mean, 1e-9 * std::abs(cpu->l2_norm));
    EXPECT_NEAR(gpu->l2_norm, cpu->l2_norm, 1e-12 * cpu->l2_norm);
    EXPECT_EQ(gpu->histogram, cpu->histogram);
  }
  cudaFree(device);
}

INSTANTIATE_TEST_SUITE_P(Floating, DeviceStatsOnGpuTest,
                         testing::Values(core::DType::kFloat32,
                                         core::DType::kFloat64,
                                         core::DType::kFloat16,
                                         core::DType::kBFloat16));

}  // namespace
}  // namespace summon::server::gpu
