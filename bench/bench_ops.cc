#include "bench/bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/dtype.h"
#include "core/seeded_init.h"

namespace summon::bench {

BenchTensor TensorOfSize(absl::string_view unit, int64_t bytes) {
  return {std::string(unit), absl::StrCat(unit, ".weight"), bytes};
}

SplitUnit SplitUnitOf(absl::string_view unit, int64_t total_bytes,
                      int64_t small_bytes) {
  return {std::string(unit),
          {std::string(unit), absl::StrCat(unit, ".small"), small_bytes},
          {std::string(unit), absl::StrCat(unit, ".large"),
           total_bytes - small_bytes}};
}

std::string LayoutJson(const std::vector<BenchTensor>& tensors,
                       const SplitUnit* split) {
  auto param = [](const BenchTensor& tensor) {
    return absl::StrCat(R"({"fqn": ")", tensor.fqn, R"(", "shape": [)",
                        tensor.numel(), R"(], "dtype": "float32"})");
  };
  std::vector<std::string> units;
  for (const BenchTensor& tensor : tensors) {
    units.push_back(absl::StrCat(R"({"fqn": ")", tensor.unit,
                                 R"(", "params": [)", param(tensor), "]}"));
  }
  if (split != nullptr) {
    units.push_back(absl::StrCat(R"({"fqn": ")", split->unit,
                                 R"(", "params": [)", param(split->small), ", ",
                                 param(split->large), "]}"));
  }
  return absl::StrCat(R"({"strategy": "FULL_SHARD", "units": [)",
                      absl::StrJoin(units, ", "), "]}");
}

namespace {

// Elements checked on each side of a shard boundary when a session is
// verified by sample.
constexpr int64_t kBoundaryWindow = 4096;

v1::SessionOptions UnitScope(const BenchTensor& tensor, bool writeback) {
  v1::SessionOptions options;
  options.mutable_module()->set_fqn(tensor.unit);
  options.mutable_module()->set_recurse(false);
  options.set_writeback(writeback);
  return options;
}

// Elements of `data` (float32 elements [first, first + n) of `fqn`) that
// differ from `factor` times the seeded init.
absl::StatusOr<int64_t> CountWrong(const std::string& fqn, int64_t first,
                                   absl::string_view data, float factor) {
  constexpr int64_t kBlock = 1 << 16;
  std::vector<float> expected(kBlock);
  std::vector<float> got(kBlock);
  const int64_t total = static_cast<int64_t>(data.size() / sizeof(float));
  int64_t wrong = 0;
  for (int64_t done = 0; done < total; done += kBlock) {
    const int64_t n = std::min(kBlock, total - done);
    absl::Status filled = core::FillSeeded(fqn, kSeed, core::DType::kFloat32,
                                           first + done, n, expected.data());
    if (!filled.ok()) return filled;
    std::memcpy(got.data(), data.data() + done * sizeof(float),
                n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      if (got[i] != factor * expected[i]) ++wrong;
    }
  }
  return wrong;
}

// Element ranges [begin, end) to check: the whole tensor up to
// `full_check_bytes`, otherwise windows around every boundary of the
// FULL_SHARD chunks (ceil(numel / G) elements each), where a gather or
// writeback that misplaces a shard shows first.
std::vector<std::pair<int64_t, int64_t>> CheckedRanges(
    const BenchTensor& tensor, int group_size, int64_t full_check_bytes) {
  const int64_t numel = tensor.numel();
  if (tensor.bytes <= full_check_bytes) return {{0, numel}};
  const int64_t chunk = (numel + group_size - 1) / group_size;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // Rank r's chunk starts at r * chunk; r = G stands for the tensor's end.
  for (int rank = 0; rank <= group_size; ++rank) {
    const int64_t boundary = std::min(rank * chunk, numel);
    const int64_t begin = std::max<int64_t>(0, boundary - kBoundaryWindow);
    const int64_t end = std::min(numel, boundary + kBoundaryWindow);
    if (!ranges.empty() && begin <= ranges.back().second) {
      ranges.back().second = std::max(ranges.back().second, end);
    } else {
      ranges.emplace_back(begin, end);
    }
  }
  return ranges;
}

double MicrosecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

absl::StatusOr<std::vector<double>> Bench::Repeat(
    int iters, const std::function<absl::StatusOr<double>()>& iteration,
    bool cold) const {
  std::vector<double> timed;
  for (int i = 0; i < config_.warmup + iters; ++i) {
    if (cold && i >= config_.warmup && config_.idle > absl::ZeroDuration()) {
      absl::SleepFor(config_.idle);
    }
    absl::StatusOr<double> us = iteration();
    if (!us.ok()) return us.status();
    if (i >= config_.warmup) timed.push_back(*us);
  }
  return timed;
}

absl::StatusOr<client::TensorData> Bench::ReadRange(const std::string& session,
                                                    const BenchTensor& tensor,
                                                    int64_t first,
                                                    int64_t count) const {
  client::ReadTensorParams params;
  params.tensor = {session, tensor.fqn, false};
  params.element_offset = first;
  params.element_count = count;
  params.chunk_bytes = config_.read_chunk_bytes;
  return client_.ReadTensor(params);
}

absl::Status Bench::Close(const std::string& session) const {
  return client_.CloseSession(session).status();
}

absl::StatusOr<int64_t> Bench::VerifyStored(const BenchTensor& tensor,
                                            float factor) const {
  absl::StatusOr<v1::Session> session =
      client_.OpenSession(kModel, UnitScope(tensor, /*writeback=*/false));
  if (!session.ok()) return session.status();
  int64_t wrong = 0;
  for (const auto& [begin, end] :
       CheckedRanges(tensor, config_.group_size, config_.full_check_bytes)) {
    absl::StatusOr<client::TensorData> data =
        ReadRange(session->id(), tensor, begin, end - begin);
    if (!data.ok()) return data.status();
    absl::StatusOr<int64_t> range_wrong =
        CountWrong(tensor.fqn, begin, data->data, factor);
    if (!range_wrong.ok()) return range_wrong.status();
    wrong += *range_wrong;
  }
  if (absl::Status closed = Close(session->id()); !closed.ok()) return closed;
  return wrong;
}

absl::StatusOr<double> Bench::TimedOpen(
    const v1::SessionOptions& options) const {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::Session> session = client_.OpenSession(kModel, options);
  const double elapsed = MicrosecondsSince(start);
  if (!session.ok()) return session.status();
  if (absl::Status closed = Close(session->id()); !closed.ok()) return closed;
  return elapsed;
}

absl::StatusOr<Measured> Bench::Open(const BenchTensor& tensor) const {
  const v1::SessionOptions options = UnitScope(tensor, /*writeback=*/false);
  absl::StatusOr<std::vector<double>> us = Repeat(
      config_.ItersFor(tensor.bytes), [&]() { return TimedOpen(options); });
  if (!us.ok()) return us.status();
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 1);
  if (!wrong.ok()) return wrong.status();
  return Measured{*std::move(us), *wrong};
}

absl::StatusOr<Measured> Bench::Read(const BenchTensor& tensor) const {
  return ReadWhole(tensor, /*into_held_buffer=*/false);
}

absl::StatusOr<Measured> Bench::ReadIntoHeldBuffer(
    const BenchTensor& tensor) const {
  return ReadWhole(tensor, /*into_held_buffer=*/true);
}

absl::StatusOr<Measured> Bench::ReadWhole(const BenchTensor& tensor,
                                          bool into_held_buffer) const {
  absl::StatusOr<v1::Session> session =
      client_.OpenSession(kModel, UnitScope(tensor, /*writeback=*/false));
  if (!session.ok()) return session.status();
  // Into a held buffer the chunks land in this buffer, filled once
  // beforehand so its pages are mapped, as the loopback TCP anchor's
  // receiver's are; otherwise ReadTensor allocates the result every time,
  // as a caller of ReadTensor gets it.
  std::string held(into_held_buffer ? tensor.bytes : 0, '\0');
  client::TensorData last;
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        if (into_held_buffer) {
          size_t at = 0;
          client::ReadTensorParams params;
          params.tensor = {session->id(), tensor.fqn, false};
          params.chunk_bytes = config_.read_chunk_bytes;
          absl::Status read = client_.ReadTensorChunks(
              params, [](const v1::TensorInfo&) { return absl::OkStatus(); },
              [&](absl::string_view bytes) {
                if (bytes.size() > held.size() - at) {
                  return absl::OutOfRangeError("more bytes than the tensor");
                }
                std::memcpy(held.data() + at, bytes.data(), bytes.size());
                at += bytes.size();
                return absl::OkStatus();
              });
          const double elapsed = MicrosecondsSince(start);
          if (!read.ok()) return read;
          return elapsed;
        }
        absl::StatusOr<client::TensorData> data =
            ReadRange(session->id(), tensor, 0, tensor.numel());
        const double elapsed = MicrosecondsSince(start);
        if (!data.ok()) return data.status();
        last = *std::move(data);
        return elapsed;
      });
  absl::Status closed = Close(session->id());
  if (!us.ok()) return us.status();
  if (!closed.ok()) return closed;
  absl::StatusOr<int64_t> wrong =
      CountWrong(tensor.fqn, 0, into_held_buffer ? held : last.data, 1);
  if (!wrong.ok()) return wrong.status();
  return Measured{*std::move(us), *wrong};
}

absl::StatusOr<Measured> Bench::LocalRead(const BenchTensor& tensor) const {
  absl::StatusOr<v1::Session> session =
      client_.OpenSession(kModel, UnitScope(tensor, /*writeback=*/false));
  if (!session.ok()) return session.status();
  std::string held(tensor.bytes, '\0');
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<client::MappedSession> mapped =
            client_.MapSession(session->id());
        if (!mapped.ok()) return mapped.status();
        absl::StatusOr<absl::Span<const uint8_t>> bytes =
            mapped->Tensor(tensor.fqn);
        if (!bytes.ok()) return bytes.status();
        if (bytes->size() != held.size()) {
          return absl::InternalError("the mapped tensor has the wrong size");
        }
        std::memcpy(held.data(), bytes->data(), bytes->size());
        *mapped = client::MappedSession();  // The unmap is part of a read.
        return MicrosecondsSince(start);
      });
  absl::Status closed = Close(session->id());
  if (!us.ok()) return us.status();
  if (!closed.ok()) return closed;
  absl::StatusOr<int64_t> wrong = CountWrong(tensor.fqn, 0, held, 1);
  if (!wrong.ok()) return wrong.status();
  return Measured{*std::move(us), *wrong};
}

// Every iteration opens a writable session, writes twice the seeded values
// (untimed) and times the close, which writes them into all shards. Doubling
// is exact in float32, so the stored tensor must read back as exactly twice
// the seeded init afterwards.
absl::StatusOr<Measured> Bench::Writeback(const BenchTensor& tensor) const {
  std::vector<float> doubled(tensor.numel());
  if (absl::Status filled =
          core::FillSeeded(tensor.fqn, kSeed, core::DType::kFloat32, 0,
                           tensor.numel(), doubled.data());
      !filled.ok()) {
    return filled;
  }
  for (float& value : doubled) value *= 2;
  const absl::string_view bytes(reinterpret_cast<const char*>(doubled.data()),
                                tensor.bytes);
  const v1::SessionOptions options = UnitScope(tensor, /*writeback=*/true);
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(tensor.bytes), [&]() -> absl::StatusOr<double> {
        absl::StatusOr<v1::Session> session =
            client_.OpenSession(kModel, options);
        if (!session.ok()) return session.status();
        client::WriteTensorParams params;
        params.tensor = {session->id(), tensor.fqn, false};
        params.dtype = v1::DTYPE_FLOAT32;
        absl::Status written = client_.WriteTensor(params, bytes).status();
        if (!written.ok()) {
          client_.CloseSession(session->id(), /*abort=*/true).IgnoreError();
          return written;
        }
        absl::SleepFor(config_.hold);
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<v1::CloseSessionResponse> closed =
            client_.CloseSession(session->id());
        const double elapsed = MicrosecondsSince(start);
        if (!closed.ok()) return closed.status();
        if (!closed->written_back()) {
          return absl::InternalError(
              absl::StrCat("close of ", tensor.unit, " did not write back"));
        }
        return elapsed;
      });
  if (!us.ok()) return us.status();
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 2);
  if (!wrong.ok()) return wrong.status();
  return Measured{*std::move(us), *wrong};
}

absl::StatusOr<LatencyRow> Bench::OpenClose(const BenchTensor& tensor,
                                            bool writeback) const {
  const v1::SessionOptions options = UnitScope(tensor, writeback);
  absl::StatusOr<std::vector<double>> us = Repeat(
      config_.tiny_repeats,
      [&]() -> absl::StatusOr<double> {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<v1::Session> session =
            client_.OpenSession(kModel, options);
        if (!session.ok()) return session.status();
        if (absl::Status closed = Close(session->id()); !closed.ok()) {
          return closed;
        }
        return MicrosecondsSince(start);
      },
      /*cold=*/false);
  if (!us.ok()) return us.status();
  // A writeback of unmodified tensors must leave the seeded values.
  absl::StatusOr<int64_t> wrong = VerifyStored(tensor, 1);
  if (!wrong.ok()) return wrong.status();
  LatencyRow row;
  row.bytes = tensor.bytes;
  row.count = tensor.numel();
  row.type = "float";
  row.mode = writeback ? "writable" : "readonly";
  row.repeats = static_cast<int>(us->size());
  row.p50_us = Percentile(*us, 50);
  row.p99_us = Percentile(*us, 99);
  row.wrong = *wrong;
  return row;
}

absl::StatusOr<LatencyRow> Bench::OpenSplit(const SplitUnit& split,
                                            bool whole_unit) const {
  v1::SessionOptions options;
  if (whole_unit) {
    options = UnitScope(split.small, /*writeback=*/false);
  } else {
    options.mutable_params()->add_fqns(split.small.fqn);
    options.set_writeback(false);
  }
  absl::StatusOr<std::vector<double>> us =
      Repeat(config_.ItersFor(whole_unit ? split.bytes() : split.small.bytes),
             [&]() { return TimedOpen(options); });
  if (!us.ok()) return us.status();
  absl::StatusOr<int64_t> wrong = VerifyStored(split.small, 1);
  if (!wrong.ok()) return wrong.status();
  LatencyRow row;
  row.bytes = whole_unit ? split.bytes() : split.small.bytes;
  row.count = row.bytes / 4;
  row.type = "float";
  row.mode = whole_unit ? "unit" : "param";
  row.repeats = static_cast<int>(us->size());
  row.p50_us = Percentile(*us, 50);
  row.p99_us = Percentile(*us, 99);
  row.wrong = *wrong;
  return row;
}

}  // namespace summon::bench
