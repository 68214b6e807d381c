#include "server/gpu/device_watch.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/watch_bins.h"
#include "server/gpu/watch_kernels.h"

namespace summon::server::gpu {
namespace {

StatsElement ElementOf(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat64:
      return StatsElement::kFloat64;
    case core::DType::kFloat16:
      return StatsElement::kFloat16;
    case core::DType::kBFloat16:
      return StatsElement::kBFloat16;
    default:  // float32: the other floating dtypes are refused before
      return StatsElement::kFloat32;
  }
}

absl::Status CheckArguments(core::DType dtype, const void* device_data,
                            int64_t numel, const core::WatchPartial* partial) {
  if (!core::IsFloatingPoint(dtype)) {
    // core::AccumulateWatchPartial's words (the test holds them equal).
    return absl::InvalidArgumentError(absl::StrCat(
        "a watch needs a floating-point tensor, not ", core::DTypeName(dtype)));
  }
  if (partial == nullptr) {
    return absl::InvalidArgumentError("no partial to add the elements to");
  }
  if (numel < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a negative element count: ", numel));
  }
  if (numel > 0 && device_data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(numel, " elements at a null device address"));
  }
  if (partial->histogram.size() > static_cast<size_t>(kMaxWatchBins)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a watch histogram has at most ", kMaxWatchBins,
                     " bins, not ", partial->histogram.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AccumulateDeviceWatchPartial(
    core::DType dtype, const void* device_data, int64_t numel,
    const std::optional<core::HistogramRange>& range,
    core::WatchPartial* partial) {
  if (absl::Status valid = CheckArguments(dtype, device_data, numel, partial);
      !valid.ok()) {
    return valid;
  }
  if (numel == 0) return absl::OkStatus();
  const int bins = static_cast<int>(partial->histogram.size());
  // Binned exactly when the CPU kernel bins: a range and a histogram.
  const bool binning = range.has_value() && bins > 0;
  WatchKernelRange kernel_range{0, 0, 0, bins};
  if (binning) {
    kernel_range.lower = range->lower;
    kernel_range.upper = range->upper;
    kernel_range.scale = core::WatchBinScale(range->lower, range->upper, bins);
  }
  WatchKernelResult result{};
  std::vector<unsigned long long> slots(binning ? bins + 2 : 0);
  if (const int error = ComputeWatchPartial(
          device_data, ElementOf(dtype), numel,
          binning ? &kernel_range : nullptr, &result, slots.data())) {
    return absl::InternalError(
        absl::StrCat("watch statistics kernel: CUDA error ", error, " (",
                     CudaErrorText(error), ")"));
  }
  // The kernel's numbers as a partial of their own, added the way nodes'
  // partials are (core::CombineWatchPartials: min/max only from finite).
  core::WatchPartial mine =
      core::EmptyWatchPartial(bins, !partial->histogram.empty());
  mine.numel = numel;
  mine.finite = static_cast<int64_t>(result.finite);
  mine.nan_count = static_cast<int64_t>(result.nan);
  mine.inf_count = static_cast<int64_t>(result.inf);
  mine.sum = result.sum;
  mine.sum_of_squares = result.sum_of_squares;
  if (mine.finite > 0) {
    mine.min = result.min;
    mine.max = result.max;
    mine.abs_max = result.abs_max;
  }
  if (binning) {
    mine.below_range = static_cast<int64_t>(slots.front());
    mine.above_range = static_cast<int64_t>(slots.back());
    for (int bin = 0; bin < bins; ++bin) {
      mine.histogram[static_cast<size_t>(bin)] =
          static_cast<int64_t>(slots[static_cast<size_t>(bin) + 1]);
    }
  }
  return core::CombineWatchPartials(mine, partial);
}

}  // namespace summon::server::gpu
