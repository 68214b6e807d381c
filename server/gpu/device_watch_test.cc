// The CUDA watch partial against the CPU kernel (core/watch_stats) on the
// same seeded values, NaN and Inf planted at known places, every floating
// dtype, device ranges at odd offsets, the first record's range pass and
// binned passes (counts, min, max, abs max and every bin exact; sums within
// the rounding bound of the two reductions' different orders, n * 2^-52 of
// the sum of magnitudes). The argument checks run everywhere; the checks
// that need a GPU skip, printing why, where none is (tests/gpu/
// run_on_gpu.sh runs them).
#include "server/gpu/device_watch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/seeded_init.h"
#include "core/watch_stats.h"
#include "gtest/gtest.h"
#include "server/gpu/cuda_shard_memory.h"
#include "server/gpu/device_stats.h"

namespace summon::server::gpu {
namespace {

using core::DType;
using core::HistogramRange;
using core::WatchPartial;

TEST(DeviceWatchTest, RefusesWhatTheCpuKernelRefusesBeforeTouchingTheGpu) {
  WatchPartial partial = core::EmptyWatchPartial(4, true);
  WatchPartial cpu = partial;
  const absl::Status refused = AccumulateDeviceWatchPartial(
      DType::kInt32, nullptr, 4, HistogramRange{0, 1}, &partial);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  const int32_t ints[4] = {};
  EXPECT_EQ(refused, core::AccumulateWatchPartial(DType::kInt32, ints, 4,
                                                  HistogramRange{0, 1}, &cpu));
  EXPECT_EQ(AccumulateDeviceWatchPartial(DType::kFloat32, nullptr, -1,
                                         std::nullopt, &partial)
                .message(),
            "a negative element count: -1");
  EXPECT_EQ(AccumulateDeviceWatchPartial(DType::kFloat32, nullptr, 8,
                                         std::nullopt, &partial)
                .message(),
            "8 elements at a null device address");
  EXPECT_EQ(AccumulateDeviceWatchPartial(DType::kFloat32, nullptr, 0,
                                         std::nullopt, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  WatchPartial huge = core::EmptyWatchPartial(4097, true);
  EXPECT_EQ(AccumulateDeviceWatchPartial(DType::kFloat32, ints, 1,
                                         HistogramRange{0, 1}, &huge)
                .message(),
            "a watch histogram has at most 4096 bins, not 4097");
  // Nothing was added by any refusal; no elements is no work (no GPU).
  EXPECT_TRUE(AccumulateDeviceWatchPartial(DType::kFloat32, nullptr, 0,
                                           HistogramRange{0, 1}, &partial)
                  .ok());
  EXPECT_EQ(partial.numel, 0);
  EXPECT_EQ(partial.histogram, std::vector<int64_t>(4, 0));
}

void ExpectSamePartial(const WatchPartial& gpu, const WatchPartial& cpu,
                       double magnitude) {
  EXPECT_EQ(gpu.numel, cpu.numel);
  EXPECT_EQ(gpu.finite, cpu.finite);
  EXPECT_EQ(gpu.nan_count, cpu.nan_count);
  EXPECT_EQ(gpu.inf_count, cpu.inf_count);
  EXPECT_EQ(gpu.min, cpu.min);
  EXPECT_EQ(gpu.max, cpu.max);
  EXPECT_EQ(gpu.abs_max, cpu.abs_max);
  EXPECT_EQ(gpu.histogram, cpu.histogram);
  EXPECT_EQ(gpu.below_range, cpu.below_range);
  EXPECT_EQ(gpu.above_range, cpu.above_range);
  // Both add doubles, in different orders (lanes and blocks on the CPU, a
  // grid-stride fold and a tree on the GPU, which also fuses the squares'
  // multiply-adds): each of the n additions rounds by at most 2^-53 of a
  // running sum no larger than the sum of magnitudes, so the two differ by
  // at most n * 2^-52 of it (2.3e-10 relative for 2^20 elements; one
  // element missed or counted twice moves the sum by ~1e-6 relative).
  const double rounding = static_cast<double>(cpu.numel) * 0x1p-52;
  EXPECT_NEAR(gpu.sum, cpu.sum, rounding * magnitude);
  EXPECT_NEAR(gpu.sum_of_squares, cpu.sum_of_squares,
              rounding * cpu.sum_of_squares);
}

class DeviceWatchOnGpuTest : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    const absl::Status available = CudaDeviceAvailable();
    if (!available.ok()) {
      GTEST_SKIP() << "needs a CUDA device: " << available.message();
    }
  }
};

// 2^20 + 4099 elements: several grid strides and a ragged tail; specials
// in the first, a middle and the last block of the grid.
constexpr int64_t kNumel = (int64_t{1} << 20) + 4099;

std::vector<uint8_t> SeededWithSpecials(DType dtype) {
  const size_t element = core::ElementSize(dtype);
  std::vector<uint8_t> host(element * static_cast<size_t>(kNumel));
  EXPECT_TRUE(
      core::FillSeeded("watch.w", 7, dtype, 0, kNumel, host.data()).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<int64_t, double> specials[] = {
      {3, nan}, {1000, inf}, {2000, -inf}, {500000, nan}, {kNumel - 1, inf}};
  for (const auto& [index, value] : specials) {
    EXPECT_TRUE(core::ConvertElements(DType::kFloat64, &value, dtype,
                                      host.data() + index * element, 1)
                    .ok());
  }
  return host;
}

TEST_P(DeviceWatchOnGpuTest, MatchesTheCpuKernelOnSeededValues) {
  const DType dtype = GetParam();
  const size_t element = core::ElementSize(dtype);
  const std::vector<uint8_t> host = SeededWithSpecials(dtype);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice),
      cudaSuccess);
  // The first record's range pass: no histogram.
  WatchPartial cpu_pass = core::EmptyWatchPartial(0, false);
  WatchPartial gpu_pass = cpu_pass;
  ASSERT_TRUE(core::AccumulateWatchPartial(dtype, host.data(), kNumel,
                                           std::nullopt, &cpu_pass)
                  .ok());
  ASSERT_TRUE(AccumulateDeviceWatchPartial(dtype, device, kNumel, std::nullopt,
                                           &gpu_pass)
                  .ok());
  EXPECT_EQ(cpu_pass.nan_count, 2);
  EXPECT_EQ(cpu_pass.inf_count, 3);
  double magnitude = 0;
  {
    std::vector<double> values(static_cast<size_t>(kNumel));
    ASSERT_TRUE(core::ConvertElements(dtype, host.data(), DType::kFloat64,
                                      values.data(), kNumel)
                    .ok());
    for (double value : values) {
      if (std::isfinite(value)) magnitude += std::fabs(value);
    }
  }
  ExpectSamePartial(gpu_pass, cpu_pass, magnitude);
  // Binned passes: the range the first pass found, a narrower one (below
  // and above counted), a zero-width one; few and many bins (many: the
  // kernel's one shared histogram instead of one per warp).
  const HistogramRange found{cpu_pass.min, cpu_pass.max};
  for (const HistogramRange& range :
       {found, HistogramRange{-0.25, 0.125}, HistogramRange{0, 0}}) {
    for (int bins : {1, 7, 64, 4096}) {
      SCOPED_TRACE(testing::Message() << "[" << range.lower << ", "
                                      << range.upper << "] " << bins);
      WatchPartial cpu = core::EmptyWatchPartial(bins, true);
      WatchPartial gpu = cpu;
      ASSERT_TRUE(
          core::AccumulateWatchPartial(dtype, host.data(), kNumel, range, &cpu)
              .ok());
      const absl::Status added =
          AccumulateDeviceWatchPartial(dtype, device, kNumel, range, &gpu);
      ASSERT_TRUE(added.ok()) << added;
      ExpectSamePartial(gpu, cpu, magnitude);
    }
  }
  // A device range at an odd offset, added to a partial that already holds
  // another slice (as a rank's second slice of a parameter is).
  const int64_t offset = 12345;
  const int64_t count = 54321;
  WatchPartial cpu = core::EmptyWatchPartial(16, true);
  WatchPartial gpu = cpu;
  for (WatchPartial* partial : {&cpu, &gpu}) {
    ASSERT_TRUE(
        core::AccumulateWatchPartial(dtype, host.data(), 100, found, partial)
            .ok());
  }
  ASSERT_TRUE(core::AccumulateWatchPartial(
                  dtype, host.data() + offset * element, count, found, &cpu)
                  .ok());
  ASSERT_TRUE(AccumulateDeviceWatchPartial(
                  dtype, static_cast<const uint8_t*>(device) + offset * element,
                  count, found, &gpu)
                  .ok());
  ExpectSamePartial(gpu, cpu, magnitude);
  cudaFree(device);
}

// All NaN: nothing finite, so min/max/abs max stay as the partial had them
// (CombineWatchPartials' rule), on both kernels.
TEST_P(DeviceWatchOnGpuTest, NoFiniteElementLeavesTheExtremesAlone) {
  const DType dtype = GetParam();
  const size_t element = core::ElementSize(dtype);
  constexpr int64_t kCount = 3000;
  std::vector<double> values(kCount, std::numeric_limits<double>::quiet_NaN());
  values[7] = std::numeric_limits<double>::infinity();
  std::vector<uint8_t> host(element * kCount);
  ASSERT_TRUE(core::ConvertElements(DType::kFloat64, values.data(), dtype,
                                    host.data(), kCount)
                  .ok());
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice),
      cudaSuccess);
  WatchPartial cpu = core::EmptyWatchPartial(4, true);
  WatchPartial gpu = cpu;
  ASSERT_TRUE(core::AccumulateWatchPartial(dtype, host.data(), kCount,
                                           HistogramRange{-1, 1}, &cpu)
                  .ok());
  ASSERT_TRUE(AccumulateDeviceWatchPartial(dtype, device, kCount,
                                           HistogramRange{-1, 1}, &gpu)
                  .ok());
  EXPECT_EQ(gpu.nan_count, kCount - 1);
  EXPECT_EQ(gpu.inf_count, 1);
  EXPECT_EQ(gpu.finite, 0);
  ExpectSamePartial(gpu, cpu, 0);
  cudaFree(device);
}

// Through the shard memory a model's device shards live in: the store's
// watch path (ShardMemory::AccumulateWatch) runs the kernels, at a byte
// offset, with the range checked.
TEST_P(DeviceWatchOnGpuTest, CudaShardMemoryAccumulatesWithTheKernels) {
  const DType dtype = GetParam();
  const size_t element = core::ElementSize(dtype);
  const std::vector<uint8_t> host = SeededWithSpecials(dtype);
  absl::StatusOr<std::unique_ptr<CudaShardMemoryProvider>> provider =
      CudaShardMemoryProvider::Create();
  ASSERT_TRUE(provider.ok()) << provider.status();
  absl::StatusOr<std::unique_ptr<ShardMemory>> memory =
      (*provider)->Allocate(0, static_cast<int64_t>(host.size()));
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_TRUE(
      (*memory)->Write(0, host.data(), static_cast<int64_t>(host.size())).ok());
  const int64_t offset = 77;
  const int64_t count = kNumel - 100;
  const HistogramRange range{-0.3, 0.3};
  WatchPartial cpu = core::EmptyWatchPartial(32, true);
  WatchPartial gpu = cpu;
  ASSERT_TRUE(core::AccumulateWatchPartial(
                  dtype, host.data() + offset * element, count, range, &cpu)
                  .ok());
  const absl::Status added = (*memory)->AccumulateWatch(
      static_cast<int64_t>(offset * element), dtype, count, range, &gpu);
  ASSERT_TRUE(added.ok()) << added;
  ExpectSamePartial(gpu, cpu, static_cast<double>(count));
  EXPECT_EQ((*memory)
                ->AccumulateWatch(static_cast<int64_t>(host.size()), dtype, 1,
                                  range, &gpu)
                .code(),
            absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(Floating, DeviceWatchOnGpuTest,
                         testing::Values(DType::kFloat32, DType::kFloat64,
                                         DType::kFloat16, DType::kBFloat16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(core::DTypeName(info.param));
                         });

}  // namespace
}  // namespace summon::server::gpu
