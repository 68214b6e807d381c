// summond: one per node; owns the node's parameter shards and serves the
// summon gRPC API (docs/api.md section 2 and docs/operations.md list the
// flags).

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/support/log.h"
#include "memory/malloc_tuning.h"
#include "server/cluster/peer_protocol.h"
#include "server/comm/nccl_communicator.h"
#include "server/coordinator/coordinator_url.h"
#include "server/coordinator/etcd_access.h"
#include "server/gpu/cuda_shard_memory.h"
#include "server/gpu/cuda_slice_destinations.h"
#include "server/server.h"
#include "server/summond_flags.h"
#include "spdlog/spdlog.h"
#include "version.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "HOST:PORT to serve on; port 0 picks a free port (logged, and "
          "written to --port-file). Empty: only --unix-socket.");
ABSL_FLAG(std::string, port_file, "",
          "When set, the chosen TCP port is written to this file once the "
          "daemon serves.");
ABSL_FLAG(std::string, unix_socket, "",
          "Also serve on this Unix domain socket path.");
ABSL_FLAG(int32_t, local_ranks, 1, "Shard-owning ranks hosted by this node.");
ABSL_FLAG(int32_t, node_rank, 0, "This node's position in --nodes.");
ABSL_FLAG(std::string, coordinator, "",
          "What a cluster runs on (a multi-node --nodes needs it; a single "
          "node none): static (the fixed --nodes list led by node 0, for "
          "tests and small labs) or "
          "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER (etcd elects the leader "
          "among --nodes, any node may lead; keeps the epoch and the "
          "rendezvous).");
ABSL_FLAG(absl::Duration, coordinator_lease_ttl, absl::Seconds(5),
          "With an etcd --coordinator: each node's etcd lease (at least 2s). "
          "A dead leader is replaced after about this long (up to twice as "
          "long while etcd changes its own leader).");
ABSL_FLAG(std::string, coordinator_ca, "",
          "With an etcd --coordinator: PEM CA that etcd's server certificate "
          "is checked with; TLS to etcd (also with --coordinator-cert alone, "
          "then the system's roots). Empty: plaintext.");
ABSL_FLAG(std::string, coordinator_cert, "",
          "PEM client certificate presented to etcd (its "
          "--client-cert-auth); with --coordinator-key.");
ABSL_FLAG(std::string, coordinator_key, "",
          "PEM private key of --coordinator-cert.");
ABSL_FLAG(std::string, coordinator_user, "",
          "etcd user this node authenticates as (etcd's auth enabled); with "
          "--coordinator-password-file.");
ABSL_FLAG(std::string, coordinator_password_file, "",
          "File whose first line is --coordinator-user's etcd password.");
ABSL_FLAG(std::string, testing_peer_protocol, "",
          "Rehearses a rolling update across releases: the Peer protocol "
          "versions this node claims to speak, N or MIN:MAX, instead of its "
          "own (a join needs a version in common). For tests only.");
ABSL_FLAG(std::vector<std::string>, nodes, {},
          "HOST:PORT of every node's daemon, comma-separated, the same list "
          "on every node. Omitted: a single node.");
ABSL_FLAG(std::string, data_dir, "",
          "Directory recording this node's models, so a restarted summond "
          "re-attaches their shared-memory shards. Empty: nothing is "
          "recorded.");
ABSL_FLAG(std::vector<std::string>, checkpoint_root, {},
          "Directories (comma-separated) checkpoints may be loaded from and "
          "saved to; relative paths are taken beneath the first. Default: "
          "<data-dir>/checkpoints.");
ABSL_FLAG(std::vector<std::string>, admins, {},
          "Principals (summon-principal metadata) allowed to operate any "
          "session.");
ABSL_FLAG(int32_t, max_sessions_per_principal, 64,
          "Most sessions one principal may hold at once; 0: no limit.");
ABSL_FLAG(int32_t, watch_history, 1000,
          "Records kept per watched parameter (a ring: the oldest go). "
          "Each record costs about 100 bytes plus 8 per histogram bin, in "
          "memory and in <data-dir>/watches.");
ABSL_FLAG(int32_t, max_open_streams, 256,
          "Most tensor read/write streams in flight; 0: no limit.");
ABSL_FLAG(int32_t, max_versions, 2,
          "Weight sync: published versions kept per model; publishing one "
          "more releases the oldest (its memory freed when its last reader "
          "ends). Each costs a copy of the model's shards on every node.");
ABSL_FLAG(int64_t, max_read_bytes, int64_t{64} << 30,
          "Weight sync: most bytes one ReadSlices call answers.");
ABSL_FLAG(int64_t, slice_fetch_bytes, int64_t{8} << 20,
          "Weight sync: a ReadSlices fetches other nodes' pieces in batches "
          "of at most this many bytes (one Peer stream each).");
ABSL_FLAG(int32_t, slice_fetches_in_flight, 4,
          "Weight sync: most of one ReadSlices' batch fetches in flight at "
          "once (they overlap each other and this node's own copies).");
ABSL_FLAG(bool, map_sessions, true,
          "Serve MapSession: clients on this host may map read-only "
          "sessions' copies (read-only, through an abstract Unix socket).");
ABSL_FLAG(int64_t, memory_budget, 0,
          "Most bytes this node's session copies may take; 0: no limit.");
ABSL_FLAG(int64_t, copy_pool_bytes, int64_t{1} << 30,
          "Most bytes of closed sessions' copies kept mapped for the next "
          "open (never more than --memory-budget when set); 0: keep none.");
ABSL_FLAG(absl::Duration, copy_pool_idle, absl::Minutes(10),
          "How long a kept session copy waits for reuse before it is "
          "unmapped, e.g. 10m, 30s.");
ABSL_FLAG(int64_t, staging_pool_bytes, int64_t{1} << 30,
          "Most bytes of spare staged segments kept in /dev/shm after a "
          "writeback, for the next one; 0: keep none.");
ABSL_FLAG(absl::Duration, staging_pool_idle, absl::Minutes(10),
          "How long a spare staged segment waits for the next writeback "
          "before it is unlinked, e.g. 10m, 30s.");
ABSL_FLAG(bool, staging_prefault, true,
          "When a writable session opens, make and page-fault each local "
          "rank's staged segment in the background (within "
          "--staging-pool-bytes and --memory-budget), so that its writeback "
          "does not fault shared memory; costs the rank's shard bytes in "
          "/dev/shm while the session is open and up to --staging-pool-idle "
          "after.");
ABSL_FLAG(int32_t, gather_parts, 8,
          "Parts a large gather between nodes runs in (8 MiB or more each), "
          "each part's local copy overlapped with the previous part's "
          "exchange; 1: no overlap. Give every node the same value.");
ABSL_FLAG(int32_t, heartbeat_ms, 1000,
          "Interval of node heartbeats to the leader, in milliseconds.");
ABSL_FLAG(int32_t, collective_timeout_ms, 30000,
          "A collective operation taking longer aborts its sessions.");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT serving GET /metrics in the Prometheus text format and "
          "the read-only web view at / and /api/ (viewer token with "
          "--tokens); HTTPS with --tls-cert/--tls-key, else plain HTTP and "
          "the web view on a loopback address only. Port 0 picks a free port "
          "(logged, and written to --metrics-port-file). Empty: no metrics "
          "endpoint.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "When set, the chosen metrics port is written to this file.");
ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT serving only grpc.health.v1.Health in plaintext (for the "
          "kubelet's probes), including service 'liveness'. Empty: none.");
ABSL_FLAG(bool, insecure_local, false,
          "Serve without TLS, trusting each caller's summon-principal header "
          "(every role). Only on loopback addresses and Unix sockets.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this daemon (with --tls-key: TLS on).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA of client certificates: every caller must present one "
          "(mTLS); peers present their --tls-cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that peers' server certificates are checked with. Empty: "
          "--tls-client-ca, else the system's roots.");
ABSL_FLAG(std::string, tokens, "",
          "Bearer tokens file (token hash, principal, roles; see "
          "docs/operations.md). Re-read on SIGHUP.");
ABSL_FLAG(std::string, peer_token_file, "",
          "File whose first line is the token this daemon presents to its "
          "peers (its --tokens entry grants peer).");
ABSL_FLAG(std::string, audit_log, "",
          "JSON-lines audit log. Empty: <data-dir>/audit.log (none without "
          "--data-dir; spdlog always).");
ABSL_FLAG(std::string, device, "cpu",
          "Where the node's parameter shards live: cpu (POSIX shared memory) "
          "or cuda (device memory, local rank i on GPU i modulo the visible "
          "GPUs; trainers map them through CUDA IPC).");
ABSL_FLAG(std::string, gather_transport, "gloo",
          "How the nodes of a --device cuda cluster exchange session copies "
          "in device memory: gloo (TCP through host buffers) or nccl (one "
          "NCCL rank per node on its first GPU). Every node must say the "
          "same.");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off.");

namespace summon::server {
namespace {

// Until SummonServer::Start returns, gRPC's own log lines (e.g. its bind
// error for a port in use, printed raw before summond's clean "cannot
// listen on ...") go to the debug level; after that its errors are
// summond's errors.
std::atomic<bool> grpc_started{false};

void GrpcLogToSpdlog(gpr_log_func_args* args) {
  const bool error = args->severity == GPR_LOG_SEVERITY_ERROR;
  spdlog::log(error && grpc_started.load() ? spdlog::level::err
                                           : spdlog::level::debug,
              "grpc {}:{}: {}", args->file, args->line, args->message);
}

// The daemon's exit code: the gRPC/absl code number, as summonctl does.
int ExitCode(const absl::Status& status) { return status.raw_code(); }

absl::Status SetLogLevel(const std::string& name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  // from_str answers "off" for anything it does not know.
  if (level == spdlog::level::off && name != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --log-level '", name,
                     "' (trace, debug, info, warn, error, critical, off)"));
  }
  spdlog::set_level(level);
  return absl::OkStatus();
}

// Written to a temporary file and renamed, so a script polling for the file
// never reads a partial port number.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write port file ", temporary));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", temporary, " to ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The docs spell flags with dashes (--port-file); Abseil flag names cannot
// contain dashes, so the name part of every "--flag[=value]" argument before a
// "--" terminator is rewritten with underscores. Values are left alone.
std::vector<std::string> UnderscoreFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + name_end, '-', '_');
  }
  return args;
}

SummonServer::Spec SpecFromFlags() {
  SummonServer::Spec spec;
  spec.listen_address = absl::GetFlag(FLAGS_listen);
  spec.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  spec.local_ranks = absl::GetFlag(FLAGS_local_ranks);
  spec.node_rank = absl::GetFlag(FLAGS_node_rank);
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.data_dir = absl::GetFlag(FLAGS_data_dir);
  spec.checkpoint_roots = absl::GetFlag(FLAGS_checkpoint_root);
  spec.admins = absl::GetFlag(FLAGS_admins);
  spec.max_sessions_per_principal =
      absl::GetFlag(FLAGS_max_sessions_per_principal);
  spec.watch_history = absl::GetFlag(FLAGS_watch_history);
  spec.max_open_streams = absl::GetFlag(FLAGS_max_open_streams);
  spec.max_versions = absl::GetFlag(FLAGS_max_versions);
  spec.max_read_bytes = absl::GetFlag(FLAGS_max_read_bytes);
  spec.slice_fetch_bytes = absl::GetFlag(FLAGS_slice_fetch_bytes);
  spec.slice_fetches_in_flight = absl::GetFlag(FLAGS_slice_fetches_in_flight);
  spec.map_sessions = absl::GetFlag(FLAGS_map_sessions);
  spec.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget);
  spec.copy_pool_bytes = absl::GetFlag(FLAGS_copy_pool_bytes);
  spec.copy_pool_idle = absl::GetFlag(FLAGS_copy_pool_idle);
  spec.staging_pool_bytes = absl::GetFlag(FLAGS_staging_pool_bytes);
  spec.staging_pool_idle = absl::GetFlag(FLAGS_staging_pool_idle);
  spec.staging_prefault = absl::GetFlag(FLAGS_staging_prefault);
  spec.gather_parts = absl::GetFlag(FLAGS_gather_parts);
  spec.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  spec.collective_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_collective_timeout_ms));
  spec.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  spec.health_listen = absl::GetFlag(FLAGS_health_listen);
  auth::SecuritySpec& security = spec.security;
  security.insecure_local = absl::GetFlag(FLAGS_insecure_local);
  security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  security.tls_key = absl::GetFlag(FLAGS_tls_key);
  security.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  security.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  security.tokens_file = absl::GetFlag(FLAGS_tokens);
  security.peer_token_file = absl::GetFlag(FLAGS_peer_token_file);
  security.audit_log = absl::GetFlag(FLAGS_audit_log);
  return spec;
}

int Run(int argc, char** argv) {
  // Before any thread allocates: malloc's arenas keep what streams free.
  // Refused where another allocator stands in (a sanitizer's): harmless.
  if (!memory::KeepFreedMemoryForReuse()) {
    spdlog::debug("malloc's thresholds were refused; streams refault memory");
  }
  // --help lists the flags of "main" files, which Abseil recognises by the
  // program's name; ours are defined in this file.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return file == __FILE__;
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  // --version: the same number as summonctl's and the Python package's.
  usage_config.version_string = [] {
    return absl::StrCat("summond ", summon::kVersion, " (API summon.v1)\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "serves full-parameter sessions over gRPC.\n"
      "  summond --insecure-local --listen 127.0.0.1:0 --port-file "
      "/tmp/summond.port --local-ranks 4\n"
      "Flag names take dashes or underscores alike (--port-file, "
      "--port_file).");
  if (absl::Status vetted = CheckFlagArgs(
          std::vector<std::string>(argv, argv + argc), __FILE__);
      !vetted.ok()) {
    spdlog::error("{}", std::string(vetted.message()));
    return ExitCode(vetted);
  }
  std::vector<std::string> args = UnderscoreFlagNames(argc, argv);
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  const std::vector<char*> positional = absl::ParseCommandLine(
      static_cast<int>(arg_pointers.size()), arg_pointers.data());
  if (positional.size() > 1) {
    spdlog::error("unexpected argument '{}'", positional[1]);
    return ExitCode(absl::InvalidArgumentError("unexpected argument"));
  }
  if (absl::Status level = SetLogLevel(absl::GetFlag(FLAGS_log_level));
      !level.ok()) {
    spdlog::error("{}", level.ToString());
    return ExitCode(level);
  }
  for (const auto& [flag, address] :
       {std::pair<const char*, std::string>{"--listen",
                                            absl::GetFlag(FLAGS_listen)},
        {"--metrics-listen", absl::GetFlag(FLAGS_metrics_listen)},
        {"--health-listen", absl::GetFlag(FLAGS_health_listen)}}) {
    if (absl::Status named = CheckPortNamed(flag, address); !named.ok()) {
      spdlog::error("{}", std::string(named.message()));
      return ExitCode(named);
    }
  }
  gpr_set_log_function(GrpcLogToSpdlog);

  // SIGINT, SIGTERM (stop) and SIGHUP (re-read the tokens file) are taken
  // by a dedicated thread (sigwait), so they are blocked before gRPC starts
  // any thread that would inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // A malformed --coordinator is INVALID_ARGUMENT.
  absl::StatusOr<CoordinatorChoice> coordinator =
      ParseCoordinatorFlag(absl::GetFlag(FLAGS_coordinator));
  if (!coordinator.ok()) {
    spdlog::error("{}", coordinator.status().ToString());
    return ExitCode(coordinator.status());
  }

  // A cluster says what it runs on: etcd, or the fixed list by name (for
  // tests and small labs: node 0 leads and the cluster stops with any
  // node). A single node needs nothing.
  if (const size_t nodes = absl::GetFlag(FLAGS_nodes).size();
      nodes > 1 && absl::GetFlag(FLAGS_coordinator).empty()) {
    const absl::Status unnamed = absl::InvalidArgumentError(absl::StrCat(
        "--nodes names ", nodes,
        " nodes but no --coordinator: give --coordinator "
        "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER (etcd elects the leader, "
        "the cluster outlives any node) or --coordinator static (the fixed "
        "list, node 0 leads: for tests and small labs)"));
    spdlog::error("{}", unnamed.ToString());
    return ExitCode(unnamed);
  }

  // TLS and authentication to etcd; a bad file is INVALID_ARGUMENT naming
  // its flag.
  absl::StatusOr<EtcdAccess> etcd_access = LoadEtcdAccess(
      EtcdAccessFlags{absl::GetFlag(FLAGS_coordinator_ca),
                      absl::GetFlag(FLAGS_coordinator_cert),
                      absl::GetFlag(FLAGS_coordinator_key),
                      absl::GetFlag(FLAGS_coordinator_user),
                      absl::GetFlag(FLAGS_coordinator_password_file)},
      coordinator->etcd);
  if (!etcd_access.ok()) {
    spdlog::error("{}", etcd_access.status().ToString());
    return ExitCode(etcd_access.status());
  }

  SummonServer::Spec spec_from_flags = SpecFromFlags();
  if (coordinator->etcd) spec_from_flags.etcd = coordinator->url;
  spec_from_flags.etcd_access = *std::move(etcd_access);
  spec_from_flags.coordinator_lease_ttl =
      absl::GetFlag(FLAGS_coordinator_lease_ttl);
  if (const std::string protocol = absl::GetFlag(FLAGS_testing_peer_protocol);
      !protocol.empty()) {
    absl::StatusOr<PeerProtocol> parsed = ParsePeerProtocol(protocol);
    if (!parsed.ok()) {
      spdlog::error("--testing-peer-protocol: {}",
                    std::string(parsed.status().message()));
      return ExitCode(parsed.status());
    }
    spec_from_flags.peer_protocol = *parsed;
  }
  // ReadSlices into callers' CUDA buffers whatever --device is: a host
  // without a GPU refuses each such read, naming the device.
  spec_from_flags.slice_devices =
      std::make_shared<gpu::CudaSliceDestinations>();
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
    absl::StatusOr<std::unique_ptr<gpu::CudaShardMemoryProvider>> provider =
        gpu::CudaShardMemoryProvider::Create();
    if (!provider.ok()) {
      spdlog::error("summond --device cuda: {}", provider.status().ToString());
      return ExitCode(provider.status());
    }
    spdlog::info("shards in device memory of {} CUDA device(s)",
                 (*provider)->device_count());
    spec_from_flags.device = *std::move(provider);
  } else if (device != "cpu") {
    spdlog::error("--device must be cpu or cuda, not '{}'", device);
    return ExitCode(absl::InvalidArgumentError("bad --device"));
  }
  const std::string transport = absl::GetFlag(FLAGS_gather_transport);
  if (transport == "nccl") {
    if (device != "cuda") {
      spdlog::error("--gather-transport nccl needs --device cuda");
      return ExitCode(absl::InvalidArgumentError("bad --gather-transport"));
    }
    // Device copies of a device-exchange gather sit on the node's first
    // rank's GPU, device 0 of the provider: the communicator's.
    spec_from_flags.device_communicator = [](int rank, int size,
                                             absl::Duration timeout,
                                             gloo::rendezvous::Store& store)
        -> absl::StatusOr<std::unique_ptr<Communicator>> {
      NcclCommunicator::Spec nccl;
      nccl.rank = rank;
      nccl.size = size;
      nccl.device = 0;
      nccl.connect_timeout = timeout;
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> created =
          NcclCommunicator::Create(nccl, store);
      if (!created.ok()) return created.status();
      return std::unique_ptr<Communicator>(*std::move(created));
    };
  } else if (transport != "gloo") {
    spdlog::error("--gather-transport must be gloo or nccl, not '{}'",
                  transport);
    return ExitCode(absl::InvalidArgumentError("bad --gather-transport"));
  }
  absl::StatusOr<std::unique_ptr<SummonServer>> server =
      SummonServer::Start(std::move(spec_from_flags));
  grpc_started.store(true);
  if (!server.ok()) {
    spdlog::error("summond failed to start: {}", server.status().ToString());
    return ExitCode(server.status());
  }
  const SummonServer::Spec& spec = (*server)->spec();
  spdlog::info(
      "summond listening on {}{}{} ({}) with {} local rank(s)",
      (*server)->address(),
      spec.unix_socket.empty() || spec.listen_address.empty() ? "" : " and ",
      spec.unix_socket.empty() ? "" : "unix:" + spec.unix_socket,
      spec.security.tls() ? "TLS" : "insecure-local", spec.local_ranks);
  if ((*server)->health_port() != 0) {
    spdlog::info("summond serving plaintext health checks on port {}",
                 (*server)->health_port());
  }
  if ((*server)->metrics_port() != 0) {
    const std::string base = absl::StrCat(
        spec.security.tls() ? "https" : "http", "://",
        spec.metrics_listen.substr(0, spec.metrics_listen.rfind(':')), ":",
        (*server)->metrics_port());
    spdlog::info("summond serving metrics on {}/metrics and the web view on {}/",
                 base, base);
  }
  const std::string metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (!metrics_port_file.empty()) {
    if (spec.metrics_listen.empty()) {
      spdlog::error("--metrics-port-file needs --metrics-listen");
      return ExitCode(absl::InvalidArgumentError("no --metrics-listen"));
    }
    if (absl::Status written =
            WritePortFile(metrics_port_file, (*server)->metrics_port());
        !written.ok()) {
      spdlog::error("{}", written.ToString());
      return ExitCode(written);
    }
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status written = WritePortFile(port_file, (*server)->port());
        !written.ok()) {
      spdlog::error("{}", written.ToString());
      return ExitCode(written);
    }
  }

  std::thread signal_waiter([&stop_signals, &server] {
    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) == 0 &&
           signal_number == SIGHUP) {
      if (absl::Status reloaded = (*server)->ReloadTokens(); !reloaded.ok()) {
        spdlog::error("SIGHUP: tokens not reloaded, the previous ones stay: {}",
                      reloaded.ToString());
      }
    }
    spdlog::info("received {}, shutting down", strsignal(signal_number));
    (*server)->Shutdown();
  });
  (*server)->Wait();
  signal_waiter.join();
  spdlog::info("summond stopped");
  return 0;
}

}  // namespace
}  // namespace summon::server

int main(int argc, char** argv) { return summon::server::Run(argc, argv); }
