#include "client/cli/summonctl_commands.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/cli_output.h"
#include "client/cli/cli_values.h"
#include "client/cli/summonctl_internal.h"
#include "client/cli/summonctl_terminal.h"
#include "client/files/npy.h"

namespace summon::client {
namespace {

// An InitMethod flag's value; zeros (the default InitMethod) when absent.
absl::StatusOr<v1::InitMethod> InitFlag(const Invocation& args,
                                        absl::string_view flag) {
  const std::optional<std::string> text = args.Get(flag);
  if (!text) return v1::InitMethod();
  return ParseInitMethod(absl::StrCat("--", flag), *text);
}

// Models ----------------------------------------------------------------------

absl::Status ModelList(const CommandContext& c) {
  return Print(c, c.client.ListModels(), &ModelListTable);
}

absl::Status ModelDescribe(const CommandContext& c) {
  return Print(c, c.client.DescribeModel(c.args.positionals[0]), &ModelTable);
}

absl::Status ModelCreate(const CommandContext& c) {
  if (absl::Status name = CheckModelName(c.args.positionals[0]); !name.ok()) {
    return name;
  }
  CreateModelParams params;
  params.name = c.args.positionals[0];
  absl::StatusOr<std::string> layout = ReadFileToString(c.args.Value("layout"));
  if (!layout.ok()) return LocalFileError(layout.status(), /*input=*/true);
  params.layout_json = *std::move(layout);
  if (c.args.Has("strategy")) {
    absl::StatusOr<v1::ShardingStrategy> strategy =
        ParseEnum<v1::ShardingStrategy>("--strategy", c.args.Value("strategy"));
    if (!strategy.ok()) return strategy.status();
    params.strategy = *strategy;
  }
  absl::StatusOr<v1::InitMethod> init = InitFlag(c.args, "init");
  if (!init.ok()) return init.status();
  params.init = *std::move(init);
  if (c.args.Has("grad-ranks")) {
    absl::StatusOr<std::vector<int32_t>> ranks =
        ParseRankList("--grad-ranks", c.args.Value("grad-ranks"));
    if (!ranks.ok()) return ranks.status();
    params.grad_ranks = *std::move(ranks);
  }
  absl::StatusOr<v1::InitMethod> grad_init = InitFlag(c.args, "grad-init");
  if (!grad_init.ok()) return grad_init.status();
  params.grad_init = *std::move(grad_init);
  return Print(c, c.client.CreateModel(params), &ModelTable);
}

absl::Status ModelLoad(const CommandContext& c) {
  if (absl::Status name = CheckModelName(c.args.positionals[0]); !name.ok()) {
    return name;
  }
  // --wrap, --strategy or --no-orig-params asks for the model to be created
  // from the checkpoint; without them it is loaded into the existing model.
  std::optional<v1::CheckpointWrapRule> create;
  if (c.args.Has("wrap") || c.args.Has("strategy") ||
      c.args.Has("no-orig-params") || c.args.Has("skip")) {
    create.emplace();
    absl::StatusOr<std::vector<std::string>> prefixes =
        ParseList("--wrap", c.args.Value("wrap"));
    if (!prefixes.ok()) return prefixes.status();
    for (std::string& prefix : *prefixes) {
      create->add_unit_prefixes(std::move(prefix));
    }
    absl::StatusOr<v1::ShardingStrategy> strategy =
        EnumFlag(c.args, "strategy", v1::SHARDING_STRATEGY_UNSPECIFIED);
    if (!strategy.ok()) return strategy.status();
    create->set_strategy(*strategy);
    if (c.args.Has("no-orig-params")) create->set_use_orig_params(false);
  }
  absl::StatusOr<v1::DType> dtype =
      EnumFlag(c.args, "dtype", v1::DTYPE_UNSPECIFIED);
  if (!dtype.ok()) return dtype.status();
  return Print(c,
               c.client.LoadModel(c.args.positionals[0], c.args.Value("from"),
                                  create, c.args.Value("skip"), *dtype),
               &LoadModelTable);
}

absl::Status ModelSave(const CommandContext& c) {
  absl::StatusOr<std::optional<uint64_t>> max_file_bytes =
      OptionalNumber<uint64_t>(c.args, "max-file-bytes");
  if (!max_file_bytes.ok()) return max_file_bytes.status();
  return Print(
      c,
      c.client.SaveModel(c.args.positionals[0], c.args.Value("to"),
                         max_file_bytes->value_or(0), c.args.Has("overwrite")),
      &SaveModelTable);
}

absl::Status ModelChecksum(const CommandContext& c) {
  return Print(c, c.client.ModelChecksum(c.args.positionals[0]),
               &ChecksumTable);
}

absl::Status ModelDelete(const CommandContext& c) {
  return Print(c,
               c.client.DeleteModel(c.args.positionals[0], c.args.Has("force")),
               &DeleteModelTable);
}

// Sessions --------------------------------------------------------------------

absl::Status SessionOpen(const CommandContext& c) {
  absl::StatusOr<v1::SessionOptions> options = SessionOptionsFromFlags(c.args);
  if (!options.ok()) return options.status();
  absl::StatusOr<v1::Session> session =
      c.client.OpenSession(c.args.positionals[0], *options);
  if (!session.ok()) return session.status();
  if (c.format != OutputFormat::kTable) {
    c.out << (c.format == OutputFormat::kJson ? ToJson(*session)
                                              : ToYaml(*session));
    return absl::OkStatus();
  }
  // Only the id on stdout, so that scripts can capture it.
  c.out << session->id() << "\n";
  for (const std::string& warning : session->warnings()) {
    c.err << "warning: " << warning << "\n";
  }
  return absl::OkStatus();
}

absl::Status SessionList(const CommandContext& c) {
  const std::vector<std::string> model = c.args.OptionalPositionals();
  const bool all = c.args.Has("all");
  absl::StatusOr<v1::ListSessionsResponse> sessions =
      c.client.ListSessions(model.empty() ? "" : model[0], all);
  if (!all && sessions.ok()) {
    // Another's lease is the holder's business, not the operator's.
    for (const v1::Session& session : sessions->sessions()) {
      WarnIfLeaseEndsSoon(c.err, session);
    }
  }
  if (!all) return Print(c, sessions, &SessionListTable);
  const int64_t now_unix_ms = absl::ToUnixMillis(absl::Now());
  return Print(c, sessions, [now_unix_ms](const v1::ListSessionsResponse& r) {
    return SessionHoldersTable(r, now_unix_ms);
  });
}

absl::Status SessionGet(const CommandContext& c) {
  absl::StatusOr<v1::Session> session =
      c.client.GetSession(c.args.positionals[0]);
  if (session.ok()) WarnIfLeaseEndsSoon(c.err, *session);
  return Print(c, session, &SessionTable);
}

std::string RenewedSessionTable(const v1::Session& session) {
  v1::ListSessionsResponse one;
  *one.add_sessions() = session;
  return SessionListTable(one);
}

absl::Status SessionRenew(const CommandContext& c) {
  absl::StatusOr<std::optional<uint32_t>> lease = LeaseFlag(c.args);
  if (!lease.ok()) return lease.status();
  return Print(c, c.client.RenewSession(c.args.positionals[0], *lease),
               &RenewedSessionTable);
}

absl::Status SessionClose(const CommandContext& c) {
  return Print(c,
               c.client.CloseSession(c.args.positionals[0], c.args.Has("abort"),
                                     c.args.Has("force")),
               &CloseSessionTable);
}

// Tensors ---------------------------------------------------------------------

absl::Status TensorStats(const CommandContext& c) {
  absl::StatusOr<std::optional<uint32_t>> bins =
      OptionalNumber<uint32_t>(c.args, "bins");
  if (!bins.ok()) return bins.status();
  return Print(
      c,
      c.client.TensorStats(c.args.positionals[0], c.args.OptionalPositionals(),
                           c.args.Has("grad"), *bins),
      &TensorStatsTable);
}

// Trainer ---------------------------------------------------------------------

absl::Status TrainerPhase(const CommandContext& c) {
  absl::StatusOr<int32_t> rank =
      ParseNumber<int32_t>("RANK", c.args.positionals[1]);
  if (!rank.ok()) return rank.status();
  absl::StatusOr<v1::TrainingPhase> phase =
      ParseEnum<v1::TrainingPhase>("PHASE", c.args.positionals[2]);
  if (!phase.ok()) return phase.status();
  absl::StatusOr<std::optional<int64_t>> step =
      OptionalNumber<int64_t>(c.args, "step");
  if (!step.ok()) return step.status();
  absl::StatusOr<std::optional<uint32_t>> deadline_ms =
      OptionalNumber<uint32_t>(c.args, "deadline-ms");
  if (!deadline_ms.ok()) return deadline_ms.status();
  return Print(c,
               c.client.ReportPhase(c.args.positionals[0], *rank, *phase, *step,
                                    *deadline_ms),
               &ReportPhaseTable);
}

FlagSpec Switch(absl::string_view name, absl::string_view help) {
  return {name, "", false, "", "", help};
}
// A switch that makes no sense together with `other`.
FlagSpec SwitchNot(absl::string_view name, absl::string_view other,
                   absl::string_view help) {
  return {name, "", false, "", other, help};
}
FlagSpec Valued(absl::string_view name, absl::string_view value_name,
                absl::string_view help) {
  return {name, value_name, false, "", "", help};
}
FlagSpec Required(absl::string_view name, absl::string_view value_name,
                  absl::string_view help) {
  return {name, value_name, true, "", "", help};
}
FlagSpec OnlyWith(absl::string_view name, absl::string_view value_name,
                  absl::string_view other_flag, absl::string_view help) {
  return {name, value_name, false, other_flag, "", help};
}

constexpr absl::string_view kGradHelp =
    "the tensor's gradient instead of the parameter";

// tensor read's and tensor get's: where the bytes go and how they come.
std::vector<FlagSpec> ReadFlags() {
  return {Required("out", "FILE.npy|-",
                   "the .npy to write (- for stdout); FIFOs and devices are "
                   "written in place"),
          Switch("grad", kGradHelp),
          Valued("dtype", "D", "convert to this floating dtype"),
          Switch("no-map", "always stream, even on the daemon's host")};
}

}  // namespace

const std::vector<FlagSpec>& SummonctlGlobalFlags() {
  static const auto* const kFlags = new std::vector<FlagSpec>{
      Valued("server", "ADDR",
             "the daemon, HOST:PORT or unix:PATH (default $SUMMON_SERVER, "
             "else 127.0.0.1:7070)"),
      Valued("output", "table|json|yaml",
             "how responses and errors are printed (-o; default table)"),
      Valued("principal", "P",
             "who calls, on an --insecure-local daemon (summon-principal "
             "metadata; default anonymous)"),
      Valued("tls-ca", "PEM", "the CA that signed a TLS daemon's certificate"),
      Valued("tls-cert", "PEM", "a client certificate, with --tls-key"),
      Valued("tls-key", "PEM", "the client certificate's private key"),
      Valued("token-file", "FILE",
             "a file whose first line is a bearer token (default "
             "$SUMMON_TOKEN_FILE); implies TLS"),
      Switch("quiet", "no progress line on stderr for tensor transfers"),
  };
  return *kFlags;
}

const std::vector<CommandSpec>& SummonctlCommands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      {"model", "list", {}, "", false, {}, &ModelList},
      {"model", "describe", {"M"}, "", false, {}, &ModelDescribe},
      {"model",
       "create",
       {"M"},
       "",
       false,
       {Required("layout", "FILE.json",
                 "the layout file: units, parameters, shapes and dtypes"),
        Valued("strategy", "S",
               "the sharding strategy (default: the layout's): full_shard, "
               "shard_grad_op, no_shard, hybrid_shard or hybrid_shard_zero2"),
        Valued("init", "zeros|seeded:SEED|external",
               "the parameters' values (default zeros; external: a trainer "
               "fills them)"),
        Valued("grad-ranks", "R,R|all",
               "the ranks that hold gradient shards (default none)"),
        OnlyWith("grad-init", "zeros|seeded:SEED", "grad-ranks",
                 "the gradients' values (default zeros)")},
       &ModelCreate},
      {"model",
       "load",
       {"M"},
       "",
       false,
       {Required("from", "PATH",
                 "the safetensors checkpoint, a file or a directory under a "
                 "--checkpoint-root of the daemon"),
        Valued("wrap", "PREFIX,...",
               "create M from the checkpoint with these module prefixes as "
               "units"),
        Valued("strategy", "S",
               "create M from the checkpoint with this sharding strategy "
               "(full_shard, shard_grad_op, no_shard, ...)"),
        Switch("no-orig-params",
               "create M with use_orig_params off (FSDP's flat parameters)"),
        Valued("skip", "REGEX", "tensors of the checkpoint to leave out"),
        Valued("dtype", "D", "convert every tensor to this floating dtype")},
       &ModelLoad},
      {"model",
       "save",
       {"M"},
       "",
       false,
       {Required("to", "PATH",
                 "where the checkpoint goes, under a --checkpoint-root of "
                 "the daemon"),
        Valued("max-file-bytes", "N",
               "split into files of at most N bytes (default one file)"),
        Switch("overwrite", "replace existing checkpoint files")},
       &ModelSave},
      {"model", "checksum", {"M"}, "", false, {}, &ModelChecksum},
      {"model",
       "delete",
       {"M"},
       "",
       false,
       {Switch("force", "detach an attached trainer first")},
       &ModelDelete},
      {"session",
       "open",
       {"M"},
       "",
       false,
       {Valued("scope", "FQN",
               "the module to gather, with every unit below it (default the "
               "root)"),
        Switch("no-recurse", "only the unit at --scope, not those below it"),
        Valued("params", "A,B",
               "gather exactly these parameters instead of a module"),
        Switch("no-writeback",
               "a read-only session: shares gathers, never blocks training, "
               "writes nothing back (inspect with it)"),
        Switch("rank0-only", "one copy, on the home rank"),
        Valued("home-rank", "R", "the home of a --rank0-only session"),
        Switch("offload-to-cpu", "keep the copy in host memory"),
        Switch("with-grads", "gather the gradients too"),
        Valued("read-dtype", "D", "reads convert to this floating dtype"),
        Valued("lease", "SECONDS",
               "how long the session lives without a renew (default 600; "
               "summonctl does not renew)")},
       &SessionOpen},
      {"session",
       "list",
       {},
       "M",
       false,
       {Switch("all",
               "every open session, whoever holds it, since when and its "
               "lease left (operators: needs the admin role)")},
       &SessionList},
      {"session", "get", {"ID"}, "", false, {}, &SessionGet},
      {"session",
       "export",
       {"ID"},
       "",
       false,
       {Required("out", "FILE.npz|FILE.safetensors|-",
                 "the file to write every tensor of the session into (- for "
                 "stdout, with --format)"),
        Valued("format", "npz|safetensors",
               "the file's format (default: from --out's extension)"),
        Switch("grad", "the session's gradients instead of its parameters"),
        Valued("dtype", "D", "convert every tensor to this floating dtype"),
        Switch("no-map", "always stream, even on the daemon's host")},
       &SessionExport},
      {"session",
       "renew",
       {"ID"},
       "",
       false,
       {Valued("lease", "SECONDS",
               "the new lease length from now (default the current one)")},
       &SessionRenew},
      {"session",
       "close",
       {"ID"},
       "",
       false,
       {SwitchNot("abort", "force",
                  "drop the session without writing anything back"),
        Switch("force",
               "write back even if training moved the units since the "
               "gather (R7)")},
       &SessionClose},
      {"tensor",
       "read",
       {"ID", "FQN"},
       "",
       false,
       ReadFlags(),
       &TensorRead},
      {"tensor",
       "get",
       {"M", "FQN"},
       "",
       false,
       ReadFlags(),
       &TensorGet},
      {"tensor",
       "write",
       {"ID", "FQN"},
       "",
       false,
       {Required("in", "FILE.npy|-",
                 "the .npy to send (- for stdin), of the tensor's exact "
                 "shape"),
        Switch("grad", kGradHelp)},
       &TensorWrite},
      {"tensor",
       "diff",
       {"ID", "FQN"},
       "",
       false,
       {Valued("session", "ID2", "compare with this session's tensor"),
        Valued("checkpoint", "FILE|DIR",
               "compare with this safetensors checkpoint's tensor (a file, "
               "an index or a directory summonctl can read)"),
        Valued("name", "NAME",
               "the other side's name for the tensor (default FQN)"),
        Switch("grad", kGradHelp)},
       &TensorDiff},
      {"tensor",
       "stats",
       {"ID"},
       "FQN",
       true,
       {Switch("grad", "the gradients' statistics"),
        Valued("bins", "N", "histogram bins (default 16)")},
       &TensorStats},
      {"trainer",
       "phase",
       {"M", "RANK", "PHASE"},
       "",
       false,
       {Valued("step", "N", "the training step the phase belongs to"),
        Valued("deadline-ms", "N",
               "wait up to N ms for writable sessions to close (R3)")},
       &TrainerPhase},
      {"watch",
       "add",
       {"M"},
       "",
       false,
       {Valued("params", "GLOB,...",
               "parameters to watch, fnmatch globs over FQNs (default: all)"),
        Valued("every", "N", "record every N-th optimizer step (default 1)"),
        Valued("histogram-bins", "B", "histogram bins per record (default 32)"),
        Switch("grads", "also record the gradients (the grads segment)")},
       &WatchAdd},
      {"watch", "list", {}, "", false, {}, &WatchList},
      {"watch", "remove", {"M"}, "", false, {}, &WatchRemove},
      {"watch",
       "show",
       {"M", "PARAM"},
       "",
       false,
       {Valued("since", "STEP", "records of steps >= STEP only"),
        Switch("grad", "the gradient's records")},
       &WatchShow},
      {"cluster", "status", {}, "", false, {}, &ClusterStatus},
  };
  return *kCommands;
}

absl::StatusOr<v1::SessionOptions> SessionOptionsFromFlags(
    const Invocation& args) {
  v1::SessionOptions options;
  if (args.Has("params")) {
    if (args.Has("scope") || args.Has("no-recurse")) {
      return absl::InvalidArgumentError(
          "--params names the parameters itself: it cannot be combined with "
          "--scope or --no-recurse");
    }
    absl::StatusOr<std::vector<std::string>> fqns =
        ParseList("--params", args.Value("params"));
    if (!fqns.ok()) return fqns.status();
    if (fqns->empty()) {
      return absl::InvalidArgumentError("--params: needs at least one FQN");
    }
    for (std::string& fqn : *fqns) {
      options.mutable_params()->add_fqns(std::move(fqn));
    }
  } else if (args.Has("scope") || args.Has("no-recurse")) {
    v1::ModuleScope& module = *options.mutable_module();
    module.set_fqn(args.Value("scope"));
    if (args.Has("no-recurse")) module.set_recurse(false);
  }
  if (args.Has("no-writeback")) options.set_writeback(false);
  options.set_rank0_only(args.Has("rank0-only"));
  absl::StatusOr<std::optional<int32_t>> home_rank =
      OptionalNumber<int32_t>(args, "home-rank");
  if (!home_rank.ok()) return home_rank.status();
  if (*home_rank) options.set_home_rank(**home_rank);
  options.set_offload_to_cpu(args.Has("offload-to-cpu"));
  options.set_with_grads(args.Has("with-grads"));
  absl::StatusOr<v1::DType> read_dtype =
      EnumFlag(args, "read-dtype", v1::DTYPE_UNSPECIFIED);
  if (!read_dtype.ok()) return read_dtype.status();
  options.set_read_dtype(*read_dtype);
  absl::StatusOr<std::optional<uint32_t>> lease = LeaseFlag(args);
  if (!lease.ok()) return lease.status();
  options.set_lease_seconds(lease->value_or(kCliSessionLeaseSeconds));
  return options;
}

}  // namespace summon::client
