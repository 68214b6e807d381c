// The raw Gloo allgather anchor: W worker processes (the anchor binary) over
// Gloo's TCP transport on loopback, as summond's GlooCommunicator uses it
// (server/comm/), minus everything summon adds around the collective.

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/anchors/anchors.h"
#include "gloo/allgather.h"
#include "gloo/barrier.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"

extern char** environ;

namespace summon::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds the rendezvous and every collective: a worker that never shows up
// fails the anchor instead of hanging the benchmark.
constexpr std::chrono::seconds kGlooTimeout(120);

// A started worker: its pid and the read end of its stdout.
struct Worker {
  pid_t pid = -1;
  int out = -1;
};

absl::StatusOr<Worker> SpawnWorker(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  Worker worker;
  const int spawned = posix_spawn(&worker.pid, argv[0], &actions, nullptr,
                                  argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start ", args[0], ": ", std::strerror(spawned)));
  }
  worker.out = fds[0];
  return worker;
}

// Reads `worker`'s stdout to its end and waits for it; its exit status must
// be 0.
absl::StatusOr<std::string> Finish(const Worker& worker) {
  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(worker.out, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buffer, static_cast<size_t>(n));
  }
  close(worker.out);
  int status = 0;
  while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gloo anchor worker ", worker.pid,
                                            " failed (status ", status,
                                            "); its stderr says why"));
  }
  return output;
}

}  // namespace

absl::StatusOr<std::vector<double>> GlooAllgatherWorker(
    int rank, int world, const std::string& store_dir, const AnchorRuns& runs) {
  if (world < 1 || rank < 0 || rank >= world || runs.bytes < world ||
      runs.iters < 1 || runs.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo anchor: rank ", rank, " of ", world, ", ", runs.bytes, " bytes"));
  }
  const size_t per_rank = static_cast<size_t>(runs.bytes / world);
  try {
    gloo::rendezvous::FileStore store(store_dir);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(kGlooTimeout);
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    context->connectFullMesh(store, device);
    // Both buffers are filled first: like a trainer's, they already exist.
    std::vector<uint8_t> in(per_rank, static_cast<uint8_t>(rank));
    std::vector<uint8_t> out(per_rank * world, 0);
    std::vector<double> timed;
    for (int i = 0; i < runs.warmup + runs.iters; ++i) {
      gloo::BarrierOptions barrier(context);
      barrier.setTag(2 * i);
      gloo::barrier(barrier);
      const Clock::time_point start = Clock::now();
      gloo::AllgatherOptions options(context);
      options.setInput(in.data(), in.size());
      options.setOutput(out.data(), out.size());
      options.setTag(2 * i + 1);
      gloo::allgather(options);
      const double us =
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count();
      if (i >= runs.warmup) timed.push_back(us);
    }
    for (int r = 0; r < world; ++r) {
      if (out[r * per_rank] != static_cast<uint8_t>(r)) {
        return absl::InternalError("gloo anchor: a rank's bytes are missing");
      }
    }
    return timed;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo anchor: ", e.what()));
  }
}

absl::StatusOr<std::vector<double>> GlooAllgatherMicros(
    const std::string& anchor_binary, int world, const AnchorRuns& runs) {
  if (world < 1) return absl::InvalidArgumentError("world must be >= 1");
  std::string dir =
      (std::filesystem::temp_directory_path() / "summon-gloo-anchor-XXXXXX")
          .string();
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  std::vector<Worker> workers;
  absl::Status spawned;
  for (int rank = 0; rank < world && spawned.ok(); ++rank) {
    absl::StatusOr<Worker> worker = SpawnWorker(
        {anchor_binary, "gloo_worker", absl::StrCat("--rank=", rank),
         absl::StrCat("--world=", world), absl::StrCat("--store=", dir),
         absl::StrCat("--bytes=", runs.bytes),
         absl::StrCat("--warmup=", runs.warmup),
         absl::StrCat("--iters=", runs.iters)});
    if (worker.ok()) {
      workers.push_back(*worker);
    } else {
      spawned = worker.status();
    }
  }
  // Every started worker is waited for, even after a failure (they time out
  // on their own when a peer is missing).
  std::vector<absl::StatusOr<std::string>> outputs;
  for (const Worker& worker : workers) outputs.push_back(Finish(worker));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (!spawned.ok()) return spawned;
  for (const absl::StatusOr<std::string>& output : outputs) {
    if (!output.ok()) return output.status();
  }
  std::vector<double> timed;
  for (absl::string_view line :
       absl::StrSplit(*outputs[0], '\n', absl::SkipWhitespace())) {
    double us = 0;
    if (!absl::SimpleAtod(line, &us)) {
      return absl::InternalError(
          absl::StrCat("gloo anchor worker printed '", line, "'"));
    }
    timed.push_back(us);
  }
  if (timed.size() != static_cast<size_t>(runs.iters)) {
    return absl::InternalError(absl::StrCat("gloo anchor: ", timed.size(),
                                            " timings for ", runs.iters,
                                            " iterations"));
  }
  return timed;
}

}  // namespace summon::bench
