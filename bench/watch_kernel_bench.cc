// A watch's kernel on its own (issue 21): core::AccumulateWatchPartial
// over one rank's shard of seeded float32 (128 MiB by default: a rank of
// bench/watch_bench.py's 256 MiB model on 2 ranks), beside a memcpy of the
// same bytes timed in the same run, so the ratio reads on any machine. The
// issue's goal for a record is >= 0.5x memcpy: the kernel at half memcpy's
// GB/s or better, on each core.
//
// Modes: `stats` (no histogram: a first record's range pass), `bins`
// (the previous record's range, binned in float32), `bins-double` (a range
// whose edges are not floats, so the reference double binning), `bf16`
// (the same values as bfloat16, converted to float32 in pieces),
// `bins-2thr` (`bins` over two threads, each over half, as a node's tasks
// split its slices; beside the same one-thread memcpy anchor).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/dtype.h"
#include "core/seeded_init.h"
#include "core/watch_stats.h"

ABSL_FLAG(int64_t, bytes, int64_t{128} << 20, "float32 bytes per run.");
ABSL_FLAG(int32_t, bins, 32, "Histogram bins.");
ABSL_FLAG(std::vector<std::string>, modes,
          (std::vector<std::string>{"stats", "bins", "bins-double", "bf16-bins",
                                    "bins-2thr"}),
          "Which modes to run.");
ABSL_FLAG(int32_t, iters, 7, "Timed repetitions of each mode.");

namespace summon::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// CPU time of the whole process (every thread), in seconds: what the work
// cost on the cores, whatever else the shared machine runs meanwhile.
double CpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) +
         1e-9 * static_cast<double>(now.tv_nsec);
}

int Run() {
  const int64_t count = absl::GetFlag(FLAGS_bytes) / 4;
  const int bins = absl::GetFlag(FLAGS_bins);
  const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
  std::vector<float> values(static_cast<size_t>(count));
  if (absl::Status filled = core::FillSeeded(
          "watch.kernel", 1, core::DType::kFloat32, 0, count, values.data());
      !filled.ok()) {
    std::fprintf(stderr, "%s\n", filled.ToString().c_str());
    return 1;
  }
  std::vector<uint16_t> bf16(static_cast<size_t>(count));
  if (absl::Status converted =
          core::ConvertElements(core::DType::kFloat32, values.data(),
                                core::DType::kBFloat16, bf16.data(), count);
      !converted.ok()) {
    std::fprintf(stderr, "%s\n", converted.ToString().c_str());
    return 1;
  }
  std::vector<float> target(values.size());
  // The previous record's range: this data's own [min, max].
  core::WatchPartial first = core::EmptyWatchPartial(bins, false);
  (void)core::AccumulateWatchPartial(core::DType::kFloat32, values.data(),
                                     count, std::nullopt, &first);
  const core::HistogramRange exact{first.min, first.max};
  // 0.1 is no float: FloatBinner declines and the double binner runs.
  const core::HistogramRange inexact{first.min - 0.1, first.max + 0.1};

  struct Mode {
    std::string name;
    core::DType dtype;
    const void* data;
    std::optional<core::HistogramRange> range;
    int threads = 1;  // Each over its share, as the node's tasks are.
  };
  const std::vector<Mode> modes = {
      {"stats", core::DType::kFloat32, values.data(), std::nullopt},
      {"bins", core::DType::kFloat32, values.data(), exact},
      {"bins-double", core::DType::kFloat32, values.data(), inexact},
      {"bf16-bins", core::DType::kBFloat16, bf16.data(), exact},
      {"bins-2thr", core::DType::kFloat32, values.data(), exact, 2},
  };
  std::printf(
      "# watch kernel: %lld float32 elements, %d bins, %d iters; "
      "memcpy of the same bytes timed before each mode\n",
      static_cast<long long>(count), bins, iters);
  std::printf("%-12s %12s %10s %10s %8s %10s %8s %7s %9s %9s %7s %8s\n",
              "# mode", "size(B)", "count", "time(us)", "GB/s", "memcpy(us)",
              "GB/s", "ratio", "cpu(us)", "mcpu(us)", "cpu-rat", "checked");
  const std::vector<std::string> chosen = absl::GetFlag(FLAGS_modes);
  for (const Mode& mode : modes) {
    if (std::find(chosen.begin(), chosen.end(), mode.name) == chosen.end()) {
      continue;
    }
    const int64_t bytes =
        count * static_cast<int64_t>(core::ElementSize(mode.dtype));
    std::vector<double> kernel_us;
    std::vector<double> memcpy_us;
    std::vector<double> kernel_cpu_us;
    std::vector<double> memcpy_cpu_us;
    int64_t counted = 0;
    for (int i = 0; i < iters; ++i) {
      auto start = std::chrono::steady_clock::now();
      double cpu = CpuSeconds();
      std::memcpy(target.data(), mode.data, static_cast<size_t>(bytes));
      memcpy_us.push_back(Seconds(start) * 1e6);
      memcpy_cpu_us.push_back((CpuSeconds() - cpu) * 1e6);
      std::vector<core::WatchPartial> partials(
          static_cast<size_t>(mode.threads),
          core::EmptyWatchPartial(bins, mode.range.has_value()));
      const auto element = static_cast<int64_t>(core::ElementSize(mode.dtype));
      const int64_t share = (count + mode.threads - 1) / mode.threads;
      auto task = [&](int t) {
        const int64_t first = std::min(count, t * share);
        const int64_t numel = std::min(count, first + share) - first;
        (void)core::AccumulateWatchPartial(
            mode.dtype,
            static_cast<const uint8_t*>(mode.data) + first * element, numel,
            mode.range, &partials[static_cast<size_t>(t)]);
      };
      start = std::chrono::steady_clock::now();
      cpu = CpuSeconds();
      std::vector<std::thread> threads;
      for (int t = 1; t < mode.threads; ++t) threads.emplace_back(task, t);
      task(0);
      for (std::thread& thread : threads) thread.join();
      kernel_us.push_back(Seconds(start) * 1e6);
      kernel_cpu_us.push_back((CpuSeconds() - cpu) * 1e6);
      core::WatchPartial partial = partials[0];
      for (size_t t = 1; t < partials.size(); ++t) {
        (void)core::CombineWatchPartials(partials[t], &partial);
      }
      counted = partial.below_range + partial.above_range;
      for (int64_t bin : partial.histogram) counted += bin;
      if (!mode.range.has_value()) counted = partial.finite;
    }
    // The best of the runs: on a shared machine the others' load only ever
    // adds time.
    const auto best = [](const std::vector<double>& us) {
      return *std::min_element(us.begin(), us.end());
    };
    const double kernel = best(kernel_us);
    const double copy = best(memcpy_us);
    // Per busy core: the threads' CPU time over their number.
    const double kernel_cpu = best(kernel_cpu_us) / mode.threads;
    const double copy_cpu = best(memcpy_cpu_us);
    std::printf(
        "%-12s %12lld %10lld %10.0f %8.2f %10.0f %8.2f %7.2f %9.0f %9.0f "
        "%7.2f %8s\n",
        mode.name.c_str(), static_cast<long long>(bytes),
        static_cast<long long>(count), kernel, bytes / kernel / 1e3, copy,
        bytes / copy / 1e3, copy / kernel, kernel_cpu, copy_cpu,
        copy_cpu / kernel_cpu, counted == count ? "ok" : "WRONG");
  }
  std::printf(
      "# best of %d. ratio: kernel GB/s over memcpy GB/s (wall; the issue's "
      "goal is >= 0.5); cpu: CPU time per busy core, cpu-ratio the same "
      "ratio in CPU time (what the others' load on a shared machine does not "
      "change)\n",
      iters);
  return 0;
}

}  // namespace
}  // namespace summon::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return summon::bench::Run();
}
