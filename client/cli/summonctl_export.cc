// summonctl session export ID --out FILE: every tensor of a session's scope
// in one file, NumPy's .npz or safetensors, streamed tensor by tensor (one
// chunk in memory) from the session's copy: in shared memory on the
// daemon's host, else over ReadTensor.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cli/progress_bar.h"
#include "client/cli/summonctl_internal.h"
#include "client/cli/summonctl_terminal.h"
#include "client/files/npy.h"
#include "client/files/npz.h"
#include "client/files/output_file.h"
#include "client/lib/wire_dtype.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/safetensors.h"

namespace summon::client {
namespace {

enum class ExportFormat { kNpz, kSafetensors };

// --format, else the name's extension.
absl::StatusOr<ExportFormat> FormatOf(const Invocation& args) {
  std::string format = args.Get("format").value_or("");
  const std::string& out = args.Value("out");
  if (format.empty()) {
    if (absl::EndsWith(out, ".npz")) format = "npz";
    if (absl::EndsWith(out, ".safetensors")) format = "safetensors";
  }
  if (format == "npz") return ExportFormat::kNpz;
  if (format == "safetensors") return ExportFormat::kSafetensors;
  if (args.Has("format")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: \"", format, "\" is not npz or safetensors"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--out ", out,
      ": cannot tell the format from the name; name a .npz or .safetensors "
      "file, or give --format npz|safetensors"));
}

// A tensor as the file will hold it: the dtype reads deliver.
struct Planned {
  v1::TensorInfo info;
  core::DType dtype = core::DType::kFloat32;
  int64_t bytes = 0;
};

absl::StatusOr<std::vector<Planned>> Plan(const v1::Session& session, bool grad,
                                          v1::DType requested) {
  const auto& tensors = grad ? session.grads() : session.params();
  if (tensors.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", session.id(), " holds no ",
        grad ? "gradients (open it with --with-grads, on a model whose ranks "
               "hold gradients)"
             : "parameters"));
  }
  v1::DType wire = requested;
  if (wire == v1::DTYPE_UNSPECIFIED) wire = session.options().read_dtype();
  std::vector<Planned> planned;
  for (const v1::TensorInfo& info : tensors) {
    Planned tensor;
    tensor.info = info;
    const std::optional<core::DType> dtype =
        CoreDType(wire == v1::DTYPE_UNSPECIFIED ? info.dtype() : wire);
    if (!dtype) {
      return absl::InternalError(absl::StrCat("the server lists ", info.fqn(),
                                              " with dtype ", info.dtype()));
    }
    tensor.dtype = *dtype;
    tensor.bytes =
        info.numel() * static_cast<int64_t>(core::ElementSize(*dtype));
    planned.push_back(std::move(tensor));
  }
  return planned;
}

std::string SafetensorsHeaderOf(const std::vector<Planned>& tensors) {
  server::SafetensorsHeader header;
  int64_t offset = 0;
  for (const Planned& tensor : tensors) {
    server::SafetensorsEntry entry;
    entry.name = tensor.info.fqn();
    entry.dtype = tensor.dtype;
    entry.shape.assign(tensor.info.shape().begin(), tensor.info.shape().end());
    entry.numel = tensor.info.numel();
    entry.begin = offset;
    entry.end = offset + tensor.bytes;
    offset = entry.end;
    header.entries.push_back(std::move(entry));
  }
  return server::SerializeSafetensorsHeader(header);
}

}  // namespace

absl::Status PrintResult(const CommandContext& c, const std::string& json,
                         const std::string& table) {
  switch (c.format) {
    case OutputFormat::kJson:
      c.out << json;
      break;
    case OutputFormat::kYaml:
      c.out << JsonToYaml(json);
      break;
    case OutputFormat::kTable:
      c.out << table;
      break;
  }
  return absl::OkStatus();
}

absl::Status SessionExport(const CommandContext& c) {
  absl::StatusOr<ExportFormat> format = FormatOf(c.args);
  if (!format.ok()) return format.status();
  absl::StatusOr<v1::DType> dtype =
      EnumFlag(c.args, "dtype", v1::DTYPE_UNSPECIFIED);
  if (!dtype.ok()) return dtype.status();
  const std::string& id = c.args.positionals[0];
  const bool grad = c.args.Has("grad");
  absl::StatusOr<v1::Session> session = c.client.GetSession(id);
  if (!session.ok()) return session.status();
  WarnIfLeaseEndsSoon(c.err, *session);
  absl::StatusOr<std::vector<Planned>> tensors = Plan(*session, grad, *dtype);
  if (!tensors.ok()) return tensors.status();

  const std::string& path = c.args.Value("out");
  const bool to_stdout = path == "-";
  std::optional<OutputFile> file;
  if (!to_stdout) {
    absl::StatusOr<OutputFile> opened = OutputFile::Open(path);
    if (!opened.ok()) return LocalFileError(opened.status(), /*input=*/false);
    file.emplace(*std::move(opened));
  }
  int64_t file_bytes = 0;
  const auto write = [&](absl::string_view bytes) -> absl::Status {
    file_bytes += static_cast<int64_t>(bytes.size());
    if (file) {
      absl::Status written = file->Write(bytes);
      return written.ok() ? written : LocalFileError(written, /*input=*/false);
    }
    c.out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return c.out ? absl::OkStatus()
                 : LocalFileError(
                       absl::DataLossError("cannot write to standard output"),
                       /*input=*/false);
  };
  NpzWriter npz(write);
  std::optional<ProgressBar> bar;
  if (c.progress) {
    int64_t total = 0;
    for (const Planned& tensor : *tensors) total += tensor.bytes;
    bar.emplace(c.err, absl::StrCat("export ", id), total);
  }
  absl::Status status;
  if (*format == ExportFormat::kSafetensors) {
    status = write(SafetensorsHeaderOf(*tensors));
  }
  for (const Planned& tensor : *tensors) {
    if (!status.ok()) break;
    if (*format == ExportFormat::kNpz) {
      absl::StatusOr<std::string> header = EncodeNpyHeader(
          tensor.dtype,
          core::Shape(tensor.info.shape().begin(), tensor.info.shape().end()));
      status = header.ok() ? npz.Begin(tensor.info.fqn()) : header.status();
      if (status.ok()) status = npz.Write(*header);
      if (!status.ok()) break;
    }
    ReadTensorParams params;
    params.tensor = {id, tensor.info.fqn(), grad};
    params.dtype = WireDType(tensor.dtype);
    std::string route;
    int64_t delivered = 0;
    status = StreamTensor(
        c, params, &route,
        [&](const v1::TensorInfo& info) -> absl::Status {
          // The header already promised this dtype and size.
          if (info.dtype() != params.dtype ||
              info.numel() != tensor.info.numel()) {
            return absl::InternalError(absl::StrCat(
                "the server sent ", info.fqn(), " as ", info.numel(),
                " elements of dtype ", info.dtype(), ", not the ",
                tensor.info.numel(), " of dtype ", params.dtype, " it listed"));
          }
          return absl::OkStatus();
        },
        [&](absl::string_view bytes) -> absl::Status {
          delivered += static_cast<int64_t>(bytes.size());
          if (bar) bar->Add(static_cast<int64_t>(bytes.size()));
          return *format == ExportFormat::kNpz ? npz.Write(bytes)
                                               : write(bytes);
        });
    if (status.ok() && delivered != tensor.bytes) {
      status =
          absl::DataLossError(absl::StrCat(tensor.info.fqn(), ": ", delivered,
                                           " bytes arrived of ", tensor.bytes));
    }
  }
  if (status.ok() && *format == ExportFormat::kNpz) status = npz.Finish();
  status = FinishDownload(std::move(status), bar, file);
  if (!status.ok()) return status;

  const char* format_name =
      *format == ExportFormat::kNpz ? "npz" : "safetensors";
  nlohmann::ordered_json json = {{"session", id},
                                 {"file", path},
                                 {"format", format_name},
                                 {"bytes", file_bytes},
                                 {"tensors", nlohmann::ordered_json::array()}};
  Table table({"FQN", "DTYPE", "SHAPE", "NUMEL"});
  for (const Planned& tensor : *tensors) {
    v1::TensorInfo info = tensor.info;
    info.set_dtype(WireDType(tensor.dtype));
    json["tensors"].push_back(nlohmann::ordered_json::parse(ToJson(info)));
    table.AddRow(TensorInfoCells(info));
  }
  std::string text = absl::StrCat(
      "exported ", tensors->size(),
      tensors->size() == 1 ? " tensor" : " tensors", " of session ", id, " to ",
      to_stdout ? "standard output" : path, " (", format_name, ", ", file_bytes,
      " bytes)\n", table.ToString());
  if (to_stdout) {
    // The data went to stdout: the description goes to stderr.
    c.err << text;
    return absl::OkStatus();
  }
  return PrintResult(c, json.dump(2) + "\n", text);
}

}  // namespace summon::client
