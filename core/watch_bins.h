#ifndef SUMMON_CORE_WATCH_BINS_H_
#define SUMMON_CORE_WATCH_BINS_H_

// Which histogram bin a watched element falls in, for the CPU kernel
// (core/watch_stats.cc) and the CUDA kernel (server/gpu/watch_kernels.cu),
// so that a parameter's histogram is the same whichever placement its
// shards have and nodes of mixed placement combine. The CUDA kernel calls
// both functions; the CPU kernel takes its scale from here and computes
// the same slot in its vectorised loops (core/watch_bins_test holds its
// histogram to WatchHistogramSlot element by element, on both its paths).
// Plain arithmetic on doubles (every supported dtype converts to double
// exactly), no library calls, compiled by gcc and nvcc alike.

#if defined(__CUDACC__)
#define SUMMON_WATCH_BINS_HOST_DEVICE __host__ __device__
#else
#define SUMMON_WATCH_BINS_HOST_DEVICE
#endif

namespace summon::core {

// The multiplier that turns an offset from the range's lower edge into a
// bin position: bins / (upper - lower), computed as 1 / width so that
// every caller rounds alike; 0 for a zero-width (or empty) range, which
// puts every element in range into bin 0. The kernels take it from here,
// computed once per range on the host.
SUMMON_WATCH_BINS_HOST_DEVICE inline double WatchBinScale(double lower,
                                                          double upper,
                                                          int bins) {
  const double width = bins > 0 ? (upper - lower) / bins : 0;
  return width > 0 ? 1 / width : 0;
}

// The element's slot among bins + 2: 0 below the range, 1 + b for bin b
// (floor((value - lower) * scale), the last bin closed at `upper`), bins + 1
// above it. `value` must be finite (NaN and Inf are counted apart and never
// binned). Branch-free apart from the selects, so the CPU loop that calls
// it vectorises; the clamps keep the conversion to int defined for
// elements outside the range, whose slot the selects then replace. The
// clamps are std::max(position, 0.0) and std::min(position, last) spelt
// out (nvcc has no std::min in device code).
SUMMON_WATCH_BINS_HOST_DEVICE inline int WatchHistogramSlot(
    double value, double lower, double upper, double scale, int bins) {
  const double last = static_cast<double>(bins - 1);
  double position = (value - lower) * scale;
  position = position < 0.0 ? 0.0 : position;
  position = last < position ? last : position;
  const int bin = static_cast<int>(position) + 1;
  return value < lower ? 0 : (value > upper ? bins + 1 : bin);
}

}  // namespace summon::core

#undef SUMMON_WATCH_BINS_HOST_DEVICE

#endif  // SUMMON_CORE_WATCH_BINS_H_
