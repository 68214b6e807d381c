// summonctl's tensor transfers: `tensor read` and `tensor write` stream a
// tensor between the wire and a .npy file (or stdout/stdin) chunk by chunk,
// with bounded memory, a progress line on a terminal and dtype conversion.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cli/progress_bar.h"
#include "client/cli/summonctl_internal.h"
#include "client/cli/summonctl_terminal.h"
#include "client/files/npy.h"
#include "client/files/output_file.h"
#include "client/lib/local_map.h"
#include "client/lib/wire_dtype.h"

namespace summon::client {
namespace {

TensorRef TensorFromArgs(const Invocation& args) {
  return {args.positionals[0], args.positionals[1], args.Has("grad")};
}

// The dtype a .npy of `header` is sent as: the stored one (the .npy's
// elements are converted to it), once its shape is checked to be the
// tensor's.
absl::StatusOr<core::DType> WireTargetFor(absl::string_view fqn,
                                          const v1::TensorInfo& info,
                                          const NpyHeader& header) {
  if (!std::equal(header.shape.begin(), header.shape.end(),
                  info.shape().begin(), info.shape().end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the .npy shape ", core::ShapeToString(header.shape),
                     " is not ", fqn, "'s shape ",
                     core::ShapeToString(core::Shape(info.shape().begin(),
                                                     info.shape().end()))));
  }
  const std::optional<core::DType> stored = CoreDType(info.dtype());
  return stored.value_or(header.dtype);
}

// Reads exactly `bytes` at `offset` of `fd`, over short reads and EINTR.
absl::Status PreadAll(int fd, char* to, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, to, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return n == 0 ? absl::DataLossError("the session's copy ended early")
                    : absl::ErrnoToStatus(errno, "reading the session's copy");
    }
    to += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

// The same-host path for a read-only session: the daemon hands the
// session's copy over as a descriptor (MapSession), read here with pread in
// chunks of about 1 MiB into one buffer (not mapped: memory stays at one
// chunk), converted per chunk as ReadTensor would. nullopt, before anything
// is delivered, when no descriptor is to be had (another host, a writable
// session or one with its own edits, a follower, summond
// --map-sessions=false, a name the session lists only as an alias, a
// conversion the server would refuse): the caller streams instead.
std::optional<absl::Status> ReadThroughMapping(const SummonClient& client,
                                               const ReadTensorParams& params,
                                               const InfoSink& on_info,
                                               const BytesSink& on_bytes) {
  absl::StatusOr<v1::MapSessionResponse> grant =
      client.GrantMapSession(params.tensor.session_id, params.tensor.grad,
                             /*host_copy_only=*/true);
  if (!grant.ok()) return std::nullopt;
  const v1::MappedTensor* tensor = nullptr;
  for (const v1::MappedTensor& listed : grant->tensors()) {
    if (listed.info().fqn() == params.tensor.fqn) tensor = &listed;
  }
  if (tensor == nullptr) return std::nullopt;
  v1::DType wire = params.dtype;
  if (wire == v1::DTYPE_UNSPECIFIED) {
    absl::StatusOr<v1::Session> session =
        client.GetSession(params.tensor.session_id);
    if (!session.ok()) return std::nullopt;
    wire = session->options().read_dtype();
  }
  if (wire == v1::DTYPE_UNSPECIFIED) wire = tensor->info().dtype();
  const std::optional<core::DType> stored = CoreDType(tensor->info().dtype());
  const std::optional<core::DType> out = CoreDType(wire);
  if (!stored || !out ||
      (*stored != *out &&
       (!core::IsFloatingPoint(*stored) || !core::IsFloatingPoint(*out)))) {
    return std::nullopt;
  }
  absl::StatusOr<int> fd = RedeemMapToken(grant->socket(), grant->token());
  if (!fd.ok()) return std::nullopt;
  const absl::Cleanup close_fd = [fd = *fd] { ::close(fd); };
  v1::TensorInfo info = tensor->info();
  info.set_dtype(wire);
  if (absl::Status status = on_info(info); !status.ok()) return status;
  const int64_t in_size = static_cast<int64_t>(core::ElementSize(*stored));
  const int64_t out_size = static_cast<int64_t>(core::ElementSize(*out));
  const int64_t per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / in_size);
  const int64_t base = static_cast<int64_t>(tensor->byte_offset());
  std::string in(static_cast<size_t>(per_chunk * in_size), '\0');
  std::string converted;
  for (int64_t done = 0, n = 0; done < info.numel(); done += n) {
    n = std::min(per_chunk, info.numel() - done);
    if (absl::Status read =
            PreadAll(*fd, in.data(), n * in_size, base + done * in_size);
        !read.ok()) {
      return read;
    }
    absl::string_view bytes(in.data(), static_cast<size_t>(n * in_size));
    if (*stored != *out) {
      converted.resize(static_cast<size_t>(n * out_size));
      if (absl::Status status = core::ConvertElements(*stored, in.data(), *out,
                                                      converted.data(), n);
          !status.ok()) {
        return status;
      }
      bytes = converted;
    }
    if (absl::Status status = on_bytes(bytes); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StreamTensor(const CommandContext& c,
                          const ReadTensorParams& params, std::string* route,
                          const InfoSink& on_info, const BytesSink& on_bytes) {
  // On the daemon's host a read-only session's copy is read from memory;
  // elsewhere, or with --no-map, it streams.
  if (!c.args.Has("no-map")) {
    *route = " from shared memory";
    std::optional<absl::Status> mapped =
        ReadThroughMapping(c.client, params, on_info, on_bytes);
    route->clear();
    if (mapped.has_value()) return *std::move(mapped);
  }
  return c.client.ReadTensorChunks(params, on_info, on_bytes);
}

// Streams the tensor into a .npy file (or stdout for "-") chunk by chunk:
// the header from the first chunk's description, then each chunk's bytes,
// so memory stays at one chunk whatever the tensor's size. The file is
// opened once the first chunk arrived, through OutputFile: a regular file
// (or a symlink's target) is written under a temporary name and renamed once
// complete; a device, FIFO or socket is written in place.
absl::Status TensorRead(const CommandContext& c) {
  return ReadTensorToFile(c, TensorFromArgs(c.args));
}

absl::Status ReadTensorToFile(const CommandContext& c,
                              const TensorRef& tensor) {
  ReadTensorParams params;
  params.tensor = tensor;
  absl::StatusOr<v1::DType> dtype =
      EnumFlag(c.args, "dtype", v1::DTYPE_UNSPECIFIED);
  if (!dtype.ok()) return dtype.status();
  params.dtype = *dtype;
  const std::string& out_path = c.args.Value("out");
  const bool to_stdout = out_path == "-";
  std::optional<OutputFile> file;
  v1::TensorInfo info;
  std::optional<ProgressBar> bar;
  const auto write = [&](absl::string_view bytes) -> absl::Status {
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
  // Shown in the progress line: how the bytes come.
  std::string route;
  const InfoSink on_info = [&](const v1::TensorInfo& first) -> absl::Status {
    info = first;
    const std::optional<core::DType> core_dtype = CoreDType(info.dtype());
    if (!core_dtype) {
      return absl::InternalError(absl::StrCat(
          "the server sent dtype ", info.dtype(), " for ", params.tensor.fqn));
    }
    if (c.progress) {
      bar.emplace(
          c.err, absl::StrCat("read ", params.tensor.fqn, route),
          info.numel() * static_cast<int64_t>(core::ElementSize(*core_dtype)));
    }
    absl::StatusOr<std::string> header = EncodeNpyHeader(
        *core_dtype, core::Shape(info.shape().begin(), info.shape().end()));
    if (!header.ok()) return header.status();
    if (!to_stdout && !file) {
      absl::StatusOr<OutputFile> opened = OutputFile::Open(out_path);
      if (!opened.ok()) return LocalFileError(opened.status(), /*input=*/false);
      file.emplace(*std::move(opened));
    }
    return write(*header);
  };
  const BytesSink on_bytes = [&](absl::string_view bytes) {
    if (bar) bar->Add(static_cast<int64_t>(bytes.size()));
    return write(bytes);
  };
  absl::Status read = FinishDownload(
      StreamTensor(c, params, &route, on_info, on_bytes), bar, file);
  if (!read.ok()) return read;
  if (to_stdout) {
    // The data went to stdout: the description goes to stderr.
    c.err << TensorInfoTable(info);
    return absl::OkStatus();
  }
  return Print(c, absl::StatusOr<v1::TensorInfo>(info), &TensorInfoTable);
}

absl::Status FinishDownload(absl::Status status,
                            std::optional<ProgressBar>& bar,
                            std::optional<OutputFile>& file) {
  if (bar && status.ok()) bar->Finish();
  if (file && status.ok()) {
    if (absl::Status committed = file->Commit(); !committed.ok()) {
      status = LocalFileError(committed, /*input=*/false);
    }
  }
  // Not committed: the destructor removes the temporary file.
  file.reset();
  return status;
}

// Streams a .npy file (or stdin for "-") into the tensor chunk by chunk,
// converting to the stored dtype on the way: memory stays at one chunk. A
// file shorter or longer than its header says stops the stream, and the
// server applies nothing.
absl::Status TensorWrite(const CommandContext& c) {
  const TensorRef ref = TensorFromArgs(c.args);
  const std::string& path = c.args.Value("in");
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      return LocalFileError(
          absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path)),
          /*input=*/true);
    }
  }
  std::istream& source = path == "-" ? c.in : file;
  absl::StatusOr<NpyHeader> header = ReadNpyHeader(source);
  if (!header.ok()) {
    return LocalFileError(
        absl::Status(header.status().code(),
                     absl::StrCat(path, ": ", header.status().message())),
        /*input=*/true);
  }
  v1::Session session;
  absl::StatusOr<std::optional<v1::TensorInfo>> info =
      c.client.FindTensor(ref, &session);
  if (!info.ok()) return info.status();
  WarnIfLeaseEndsSoon(c.err, session);
  core::DType target = header->dtype;
  if (info->has_value()) {
    absl::StatusOr<core::DType> wire = WireTargetFor(ref.fqn, **info, *header);
    if (!wire.ok()) return wire.status();
    target = *wire;
  }
  const int64_t source_size =
      static_cast<int64_t>(core::ElementSize(header->dtype));
  const int64_t count = header->data_bytes / source_size;
  constexpr int64_t kChunkElements = int64_t{1} << 18;
  int64_t sent = 0;
  std::string raw;
  std::optional<ProgressBar> bar;
  if (c.progress) {
    bar.emplace(c.err, absl::StrCat("write ", ref.fqn), header->data_bytes);
  }
  WriteTensorParams params;
  params.tensor = ref;
  params.dtype = WireDType(target);
  params.shape.assign(header->shape.begin(), header->shape.end());
  params.tensor_info = *info;
  return Print(
      c,
      c.client.WriteTensorChunks(
          params, count,
          [&](std::string* chunk) -> absl::StatusOr<bool> {
            const int64_t n = std::min(kChunkElements, count - sent);
            if (n == 0) {
              if (bar) bar->Finish();
              if (source.peek() != std::char_traits<char>::eof()) {
                return LocalFileError(
                    absl::InvalidArgumentError(absl::StrCat(
                        path, ": data runs past the ", header->data_bytes,
                        " bytes its .npy header gives")),
                    /*input=*/true);
              }
              return false;
            }
            raw.resize(static_cast<size_t>(n * source_size));
            source.read(raw.data(), static_cast<std::streamsize>(raw.size()));
            if (source.gcount() != static_cast<std::streamsize>(raw.size())) {
              return LocalFileError(
                  absl::InvalidArgumentError(absl::StrCat(
                      path, ": data ends before the ", header->data_bytes,
                      " bytes its .npy header gives")),
                  /*input=*/true);
            }
            sent += n;
            if (bar) bar->Add(static_cast<int64_t>(raw.size()));
            if (target == header->dtype) {
              chunk->swap(raw);
              return true;
            }
            chunk->resize(static_cast<size_t>(n) * core::ElementSize(target));
            absl::Status converted = core::ConvertElements(
                header->dtype, raw.data(), target, chunk->data(), n);
            if (!converted.ok()) return converted;
            return true;
          }),
      &WriteTensorTable);
}

}  // namespace summon::client
