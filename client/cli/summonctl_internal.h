#ifndef SUMMON_CLIENT_CLI_SUMMONCTL_INTERNAL_H_
#define SUMMON_CLIENT_CLI_SUMMONCTL_INTERNAL_H_

// Shared by summonctl's command files (summonctl_commands.cc: models,
// sessions, the trainer and the command table; summonctl_tensors.cc: tensor
// transfers): printing a response and reading flag values.

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli_output.h"
#include "client/cli/cli_values.h"
#include "client/cli/progress_bar.h"
#include "client/cli/summonctl_context.h"
#include "client/files/output_file.h"

namespace summon::client {

// Prints `response` in the context's format (`table`, a function of the
// message returning a string, renders the table).
template <typename Message, typename TableFn>
absl::Status Print(const CommandContext& context,
                   const absl::StatusOr<Message>& response,
                   const TableFn& table) {
  if (!response.ok()) return response.status();
  switch (context.format) {
    case OutputFormat::kJson:
      context.out << ToJson(*response);
      break;
    case OutputFormat::kYaml:
      context.out << ToYaml(*response);
      break;
    case OutputFormat::kTable:
      context.out << table(*response);
      break;
  }
  return absl::OkStatus();
}

// A numeric flag's value; nullopt when the flag is absent.
template <typename T>
absl::StatusOr<std::optional<T>> OptionalNumber(const Invocation& args,
                                                absl::string_view flag) {
  const std::optional<std::string> text = args.Get(flag);
  if (!text) return std::optional<T>();
  absl::StatusOr<T> value = ParseNumber<T>(absl::StrCat("--", flag), *text);
  if (!value.ok()) return value.status();
  return std::optional<T>(*value);
}

// --lease SECONDS; nullopt when absent. summonctl refuses 0 itself, naming
// the flag, instead of leaving it to the server's message about the field.
inline absl::StatusOr<std::optional<uint32_t>> LeaseFlag(
    const Invocation& args) {
  absl::StatusOr<std::optional<uint32_t>> lease =
      OptionalNumber<uint32_t>(args, "lease");
  if (lease.ok() && *lease && **lease == 0) {
    return absl::InvalidArgumentError(
        "--lease: must be at least 1 second (at most 86400)");
  }
  return lease;
}

// An enum flag's value; `absent` when the flag is not given.
template <typename Enum>
absl::StatusOr<Enum> EnumFlag(const Invocation& args, absl::string_view flag,
                              Enum absent) {
  const std::optional<std::string> text = args.Get(flag);
  if (!text) return absent;
  return ParseEnum<Enum>(absl::StrCat("--", flag), *text);
}

// Checks and advice (summonctl_hints.cc) --------------------------------------

// The longest model name summond accepts (server/store/segment_names.cc,
// ValidateModelName): model names end up in shared-memory segment names.
inline constexpr size_t kMaxModelNameBytes = 128;

// INVALID_ARGUMENT for a server address without a port ("127.0.0.1"), which
// gRPC would dial at port 0; `from` says where it came from ("--server").
absl::Status CheckServerAddress(absl::string_view address,
                                absl::string_view from);

// INVALID_ARGUMENT unless `name` is 1 to kMaxModelNameBytes of A-Z a-z 0-9
// . _ - and not "." or "..": the daemon's rule, checked before sending.
absl::Status CheckModelName(absl::string_view name);

// A command's NOT_FOUND with advice appended: "did you mean" for an FQN of
// `tensor` commands and `session open --scope/--params` close to one the
// session or model has, and how `model load` creates a model that does not
// exist. Other statuses are returned as they are.
absl::Status WithHints(const CommandContext& c, const absl::Status& status);

// `summonctl __complete KIND [ARG]`, for the completion script: prints one
// a line the names the daemon has, sorted: `models`, `sessions`, `fqns ID`
// (the session's tensors and the model's aliases), `modules M` (the model's
// units, parameters and aliases). Prints nothing when the daemon does not
// answer. Returns the exit code, 0.
int RunDaemonCompletion(const std::vector<std::string>& words,
                        const SummonClient& client, std::ostream& out);

// Warns on `err` when `session`'s lease ends within a minute (or ended):
// summonctl does not renew, and an expired session's edits are dropped.
void WarnIfLeaseEndsSoon(std::ostream& err, const v1::Session& session);

// The tensor commands (summonctl_tensors.cc).
absl::Status TensorRead(const CommandContext& c);
// tensor read's body for any session: streams `tensor` into --out (a .npy
// or - for stdout), honouring --dtype and --no-map.
absl::Status ReadTensorToFile(const CommandContext& c, const TensorRef& tensor);
using InfoSink = std::function<absl::Status(const v1::TensorInfo&)>;
using BytesSink = std::function<absl::Status(absl::string_view)>;
// One tensor's description, then its bytes chunk by chunk (about 1 MiB):
// from the session's copy in shared memory on the daemon's host (a read-only
// session; `route` says so while it is tried, for a progress line), else,
// or with --no-map, streamed by ReadTensor.
absl::Status StreamTensor(const CommandContext& c,
                          const ReadTensorParams& params, std::string* route,
                          const InfoSink& on_info, const BytesSink& on_bytes);
// Ends a download into a file the user named: when `status` is OK the
// progress bar finishes and the file is committed (renamed into place);
// otherwise, or when the commit fails, the temporary file is removed so no
// half-written file is left behind. Returns the download's final status.
absl::Status FinishDownload(absl::Status status,
                            std::optional<ProgressBar>& bar,
                            std::optional<OutputFile>& file);
// tensor get (summonctl_get.cc): a read-only session of exactly one
// parameter, read into --out and closed, on error and on Ctrl-C too.
absl::Status TensorGet(const CommandContext& c);
absl::Status TensorWrite(const CommandContext& c);
// session export (summonctl_export.cc): every tensor of a session into one
// .npz or safetensors file.
absl::Status SessionExport(const CommandContext& c);
// tensor diff (summonctl_diff.cc): a parameter against another session's or
// a checkpoint's.
absl::Status TensorDiff(const CommandContext& c);
// Prints a command's own result (no response message of its own): `json`
// as JSON or YAML, `table` as the table text.
absl::Status PrintResult(const CommandContext& c, const std::string& json,
                         const std::string& table);

// summonctl cluster status (summonctl_cluster.cc).
absl::Status ClusterStatus(const CommandContext& c);

// The watch commands (summonctl_watches.cc).
absl::Status WatchAdd(const CommandContext& c);
absl::Status WatchList(const CommandContext& c);
absl::Status WatchRemove(const CommandContext& c);
absl::Status WatchShow(const CommandContext& c);
// One bar per norm, scaled between the finite ones' min and max; `!` for a
// record with no finite element.
std::string NormSparkline(const std::vector<double>& norms);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_SUMMONCTL_INTERNAL_H_
