// summonctl tensor diff ID FQN (--session ID2 | --checkpoint PATH): how far
// a session's parameter is from another session's or a safetensors
// checkpoint's tensor of the same shape. Both sides are read in windows of
// kWindow elements as float64 (exact for every floating dtype), so memory
// stays at two windows whatever the tensor's size.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cli/summonctl_internal.h"
#include "client/cli/summonctl_terminal.h"
#include "client/lib/wire_dtype.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/safetensors.h"

namespace summon::client {
namespace {

constexpr int64_t kWindow = int64_t{1} << 18;

// One side of the comparison: its shape and a reader of element windows.
struct Side {
  std::string label;  // "session s-1 w" or "checkpoint ckpt/ w".
  core::Shape shape;
  int64_t numel = 0;
  // Fills `out` with elements [offset, offset + out->size()) as float64.
  std::function<absl::Status(int64_t offset, std::vector<double>* out)> read;
};

absl::StatusOr<Side> SessionSide(const CommandContext& c, TensorRef ref) {
  absl::StatusOr<std::optional<v1::TensorInfo>> info = c.client.FindTensor(ref);
  if (!info.ok()) return info.status();
  if (!info->has_value()) {
    // The server's NOT_FOUND, which summonctl completes with a "did you
    // mean" (WithHints).
    ReadTensorParams probe;
    probe.tensor = ref;
    probe.element_count = 1;
    absl::StatusOr<TensorData> read = c.client.ReadTensor(probe);
    return read.ok() ? absl::NotFoundError(absl::StrCat(
                           "no tensor ", ref.fqn, " in session ",
                           ref.session_id))
                     : read.status();
  }
  Side side;
  side.label = absl::StrCat("session ", ref.session_id, " ", ref.fqn);
  side.shape.assign((*info)->shape().begin(), (*info)->shape().end());
  side.numel = (*info)->numel();
  side.read = [&c, ref](int64_t offset, std::vector<double>* out) {
    ReadTensorParams params;
    params.tensor = ref;
    params.dtype = v1::DTYPE_FLOAT64;
    params.element_offset = offset;
    params.element_count = static_cast<int64_t>(out->size());
    absl::StatusOr<TensorData> data = c.client.ReadTensor(params);
    if (!data.ok()) return data.status();
    if (data->data.size() != out->size() * sizeof(double)) {
      return absl::DataLossError(absl::StrCat(
          ref.fqn, ": ", data->data.size(), " bytes arrived of ",
          out->size() * sizeof(double)));
    }
    std::memcpy(out->data(), data->data.data(), data->data.size());
    return absl::OkStatus();
  };
  return side;
}

absl::StatusOr<Side> CheckpointSide(const std::string& path,
                                    const std::string& name) {
  absl::StatusOr<server::SafetensorsCheckpoint> opened =
      server::OpenSafetensorsCheckpoint(path);
  if (!opened.ok()) {
    return LocalFileError(
        absl::Status(opened.status().code(),
                     absl::StrCat("--checkpoint: ", opened.status().message())),
        /*input=*/true);
  }
  auto checkpoint =
      std::make_shared<server::SafetensorsCheckpoint>(*std::move(opened));
  const auto found = checkpoint->by_name.find(name);
  if (found == checkpoint->by_name.end()) {
    return absl::NotFoundError(absl::StrCat(
        "the checkpoint ", path, " has no tensor ", name,
        " (--name names it when the checkpoint calls it otherwise)"));
  }
  const server::SafetensorsTensorRef ref = checkpoint->tensors[found->second];
  const server::SafetensorsEntry& entry = checkpoint->Entry(ref);
  if (!core::IsFloatingPoint(entry.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint's ", name, " is ", core::DTypeName(entry.dtype),
        ": only floating tensors are compared"));
  }
  Side side;
  side.label = absl::StrCat("checkpoint ", path, " ", name);
  side.shape = entry.shape;
  side.numel = entry.numel;
  side.read = [checkpoint, ref](int64_t offset, std::vector<double>* out) {
    const server::SafetensorsEntry& entry = checkpoint->Entry(ref);
    const server::SafetensorsFile& file = checkpoint->files[ref.file];
    const int64_t size = static_cast<int64_t>(core::ElementSize(entry.dtype));
    std::string raw(out->size() * static_cast<size_t>(size), '\0');
    if (absl::Status read = server::PreadFully(
            file.fd.get(), raw.data(), static_cast<int64_t>(raw.size()),
            file.header.data_start + entry.begin + offset * size);
        !read.ok()) {
      return LocalFileError(
          absl::Status(read.code(), absl::StrCat(file.path, ": ",
                                                 read.message())),
          /*input=*/true);
    }
    return core::ConvertElements(entry.dtype, raw.data(),
                                 core::DType::kFloat64, out->data(),
                                 static_cast<int64_t>(out->size()));
  };
  return side;
}

// What differs between two tensors. Elements differ when their values do
// (+0 equals -0; NaN equals NaN); a NaN against a number, or two infinities
// of opposite sign, differ by infinity. The relative difference divides by
// the other side's magnitude (infinite when it is 0).
struct Difference {
  int64_t numel = 0;
  int64_t differing = 0;
  int64_t first_differing = -1;
  double max_abs = 0;
  double max_rel = 0;

  void Add(int64_t offset, const std::vector<double>& a,
           const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i];
      const double y = b[i];
      if (x == y || (std::isnan(x) && std::isnan(y))) continue;
      if (first_differing < 0) first_differing = offset + static_cast<int64_t>(i);
      ++differing;
      double abs = std::fabs(x - y);
      if (std::isnan(abs)) abs = std::numeric_limits<double>::infinity();
      max_abs = std::max(max_abs, abs);
      const double rel = y == 0 || std::isnan(y)
                             ? std::numeric_limits<double>::infinity()
                             : abs / std::fabs(y);
      max_rel = std::max(max_rel, rel);
    }
  }
};

// JSON has no infinity: a non-finite figure is written as its text.
nlohmann::ordered_json Number(double value) {
  if (std::isfinite(value)) return value;
  return value > 0 ? "inf" : "-inf";
}

std::string Figure(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrCat(value);
}

}  // namespace

absl::Status TensorDiff(const CommandContext& c) {
  const bool grad = c.args.Has("grad");
  const bool against_session = c.args.Has("session");
  if (against_session == c.args.Has("checkpoint")) {
    return absl::InvalidArgumentError(
        "tensor diff compares with one other tensor: give --session ID2 or "
        "--checkpoint PATH");
  }
  const TensorRef ref{c.args.positionals[0], c.args.positionals[1], grad};
  const std::string other_name = c.args.Get("name").value_or(ref.fqn);
  absl::StatusOr<Side> a = SessionSide(c, ref);
  if (!a.ok()) return a.status();
  absl::StatusOr<Side> b =
      against_session
          ? SessionSide(c, {c.args.Value("session"), other_name, grad})
          : CheckpointSide(c.args.Value("checkpoint"), other_name);
  if (!b.ok()) return b.status();
  if (a->shape != b->shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot compare: ", a->label, " has shape ",
        core::ShapeToString(a->shape), ", ", b->label, " has shape ",
        core::ShapeToString(b->shape)));
  }
  Difference diff;
  diff.numel = a->numel;
  std::vector<double> x;
  std::vector<double> y;
  for (int64_t offset = 0; offset < a->numel; offset += kWindow) {
    const size_t n = static_cast<size_t>(std::min(kWindow, a->numel - offset));
    x.resize(n);
    y.resize(n);
    if (absl::Status read = a->read(offset, &x); !read.ok()) return read;
    if (absl::Status read = b->read(offset, &y); !read.ok()) return read;
    diff.Add(offset, x, y);
  }
  const nlohmann::ordered_json json = {
      {"a", a->label},
      {"b", b->label},
      {"shape", a->shape},
      {"numel", diff.numel},
      {"differing", diff.differing},
      {"firstDiffering", diff.first_differing},
      {"maxAbsDiff", Number(diff.max_abs)},
      {"maxRelDiff", Number(diff.max_rel)}};
  Table table;
  table.AddRow({"a", a->label});
  table.AddRow({"b", b->label});
  table.AddRow({"shape", core::ShapeToString(a->shape)});
  table.AddRow({"numel", absl::StrCat(diff.numel)});
  table.AddRow({"differing", absl::StrCat(diff.differing)});
  table.AddRow({"first_differing", diff.first_differing < 0
                                       ? "-"
                                       : absl::StrCat(diff.first_differing)});
  table.AddRow({"max_abs_diff", Figure(diff.max_abs)});
  table.AddRow({"max_rel_diff", Figure(diff.max_rel)});
  return PrintResult(c, json.dump(2) + "\n", table.ToString());
}

}  // namespace summon::client
