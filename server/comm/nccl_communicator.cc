#include "server/comm/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cuda_runtime.h"
#include "gloo/rendezvous/store.h"
#include "nccl.h"
#include "server/comm/collective_args.h"

namespace summon::server {
namespace {

// Where rank 0 publishes the unique id, under the store's incarnation prefix.
constexpr char kUniqueIdKey[] = "nccl_unique_id";
// How often a running operation is checked for completion, errors and
// Abort(): short against a collective, long against a CUDA query.
constexpr absl::Duration kPollInterval = absl::Microseconds(50);

absl::Status CudaStatus(absl::string_view what, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// ncclInProgress counts as success: a non-blocking communicator accepted the
// call and finishes it asynchronously.
absl::Status NcclStatus(absl::string_view what, ncclResult_t result,
                        ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0')
    absl::StrAppend(&message, " (", last, ")");
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    return absl::InvalidArgumentError(message);
  }
  return absl::UnavailableError(message);
}

// Issues `calls` as one NCCL group, so that sends and receives to several
// peers progress together.
absl::Status Grouped(ncclComm_t comm, absl::FunctionRef<absl::Status()> calls) {
  if (absl::Status s = NcclStatus("ncclGroupStart", ncclGroupStart(), comm);
      !s.ok()) {
    return s;
  }
  const absl::Status issued = calls();
  const absl::Status ended = NcclStatus("ncclGroupEnd", ncclGroupEnd(), comm);
  return issued.ok() ? ended : issued;
}

// Rank 0 makes the unique id and publishes it; the others wait for it.
absl::Status ShareUniqueId(int rank, gloo::rendezvous::Store& store,
                           ncclUniqueId* id) {
  try {
    if (rank == 0) {
      if (absl::Status s =
              NcclStatus("ncclGetUniqueId", ncclGetUniqueId(id), nullptr);
          !s.ok()) {
        return s;
      }
      store.set(
          kUniqueIdKey,
          std::vector<char>(id->internal, id->internal + sizeof(id->internal)));
      return absl::OkStatus();
    }
    const std::vector<char> bytes = store.get(kUniqueIdKey);
    if (bytes.size() != sizeof(id->internal)) {
      return absl::InternalError(
          absl::StrCat("NCCL unique id in the store has ", bytes.size(),
                       " bytes, expected ", sizeof(id->internal)));
    }
    std::memcpy(id->internal, bytes.data(), bytes.size());
    return absl::OkStatus();
  } catch (const std::exception& e) {
    // Gloo's store interface reports failures by exception; ours carry the
    // status text.
    const std::string message =
        absl::StrCat("sharing the NCCL unique id: ", e.what());
    if (absl::StrContains(e.what(), "DEADLINE_EXCEEDED")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  }
}

// Waits for a non-blocking communicator to finish initialising.
absl::Status AwaitInit(ncclComm_t comm, absl::Time deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (absl::Status s = NcclStatus("ncclCommGetAsyncError",
                                    ncclCommGetAsyncError(comm, &state), comm);
        !s.ok()) {
      return s;
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (absl::Status s = NcclStatus("ncclCommInitRankConfig", state, comm);
        !s.ok()) {
      return s;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          "NCCL peers did not join within the connect timeout");
    }
    absl::SleepFor(kPollInterval);
  }
}

const uint8_t* Bytes(const void* p) { return static_cast<const uint8_t*>(p); }
uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const Spec& spec, gloo::rendezvous::Store& store) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", spec.rank, " is not in a communicator of size ", spec.size));
  }
  if (spec.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("connect_timeout must be positive");
  }
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device for NCCL: ",
        counted == cudaSuccess ? "none found" : cudaGetErrorString(counted)));
  }
  if (spec.device < 0 || spec.device >= devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", spec.device, " does not exist (", devices, " found)"));
  }
  if (absl::Status s = CudaStatus("cudaSetDevice", cudaSetDevice(spec.device));
      !s.ok()) {
    return s;
  }
  const absl::Time deadline = absl::Now() + spec.connect_timeout;
  ncclUniqueId id;
  if (absl::Status s = ShareUniqueId(spec.rank, store, &id); !s.ok()) return s;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  absl::Status joined = NcclStatus(
      "ncclCommInitRankConfig",
      ncclCommInitRankConfig(&comm, spec.size, id, spec.rank, &config), comm);
  if (joined.ok()) joined = AwaitInit(comm, deadline);
  cudaStream_t stream = nullptr;
  if (joined.ok()) {
    joined =
        CudaStatus("cudaStreamCreateWithFlags",
                   cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  void* scratch = nullptr;
  if (joined.ok()) {
    joined = CudaStatus("cudaMalloc", cudaMalloc(&scratch, sizeof(float)));
  }
  if (!joined.ok()) {
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (comm != nullptr) ncclCommAbort(comm);
    return joined;
  }
  return absl::WrapUnique(new NcclCommunicator(spec.rank, spec.size,
                                               spec.device, comm, stream,
                                               static_cast<float*>(scratch)));
}

NcclCommunicator::NcclCommunicator(int rank, int size, int device,
                                   ncclComm* comm, CUstream_st* stream,
                                   float* barrier_scratch)
    : rank_(rank),
      size_(size),
      device_(device),
      comm_(comm),
      stream_(stream),
      barrier_scratch_(barrier_scratch) {}

NcclCommunicator::~NcclCommunicator() {
  {
    absl::MutexLock lock(&op_mu_);
    // Every operation completes (or fails) before it returns, so nothing is
    // left to flush: aborting is teardown that cannot wait on a peer.
    AbortComm();
  }
  cudaStreamDestroy(stream_);
  cudaFree(barrier_scratch_);
}

void NcclCommunicator::AbortComm() {
  if (comm_aborted_) return;
  cudaSetDevice(device_);
  ncclCommAbort(comm_);
  comm_aborted_ = true;
}

void NcclCommunicator::Abort() {
  aborted_ = true;
  // A running operation sees the flag within a poll interval and aborts the
  // NCCL communicator itself; with none running, do it now.
  if (op_mu_.TryLock()) {
    AbortComm();
    op_mu_.Unlock();
  }
}

absl::Status NcclCommunicator::AwaitCompletion(absl::Time deadline) {
  for (;;) {
    if (aborted_) return absl::AbortedError("aborted");
    ncclResult_t state = ncclSuccess;
    if (absl::Status s =
            NcclStatus("ncclCommGetAsyncError",
                       ncclCommGetAsyncError(comm_, &state), comm_);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = NcclStatus("NCCL", state, comm_); !s.ok()) return s;
    if (state == ncclSuccess) {
      const cudaError_t queried = cudaStreamQuery(stream_);
      if (queried == cudaSuccess) return absl::OkStatus();
      if (queried != cudaErrorNotReady) {
        return CudaStatus("cudaStreamQuery", queried);
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("did not complete in time");
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status NcclCommunicator::Run(absl::string_view name,
                                   const CollectiveOptions& options,
                                   absl::FunctionRef<absl::Status()> enqueue) {
  absl::MutexLock serial(&op_mu_);
  const auto what = [&] {
    return absl::StrCat(name, " (tag ", options.tag, ") on rank ", rank_);
  };
  if (aborted_) {
    AbortComm();
    return absl::AbortedError(
        absl::StrCat(what(), ": communicator was aborted"));
  }
  if (!broken_.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "communicator is broken and must be re-created; ", broken_.message()));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status status = CudaStatus("cudaSetDevice", cudaSetDevice(device_));
  if (status.ok()) status = enqueue();
  if (status.ok()) status = AwaitCompletion(deadline);
  if (status.ok()) return status;
  // The peers may be part-way through the operation: the communicator
  // cannot be trusted any more.
  AbortComm();
  if (aborted_) {
    return absl::AbortedError(absl::StrCat(what(), ": aborted"));
  }
  broken_ =
      absl::Status(status.code(), absl::StrCat(what(), ": ", status.message()));
  return broken_;
}

absl::Status NcclCommunicator::AllGatherV(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckAllGatherV(
      *this, send, send_bytes, recv, recv_bytes_per_rank, options);
  if (!slices.ok()) return slices.status();
  const std::vector<int64_t>& bytes = slices->bytes;
  const bool uniform = std::all_of(bytes.begin(), bytes.end(),
                                   [&](int64_t b) { return b == bytes[0]; });
  return Run("allgatherv", options, [&]() -> absl::Status {
    if (uniform) {
      return NcclStatus(
          "ncclAllGather",
          ncclAllGather(send, recv, bytes[0], ncclUint8, comm_, stream_),
          comm_);
    }
    return Grouped(comm_, [&]() -> absl::Status {
      for (int r = 0; r < size_; ++r) {
        if (bytes[r] == 0) continue;
        uint8_t* slot = Bytes(recv) + slices->offsets[r];
        if (absl::Status s = NcclStatus(
                "ncclBroadcast",
                ncclBroadcast(r == rank_ ? send : slot, slot, bytes[r],
                              ncclUint8, r, comm_, stream_),
                comm_);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  });
}

absl::Status NcclCommunicator::CopyOnDevice(void* dst, const void* src,
                                            int64_t bytes) {
  // The root's own slice stays on its device; an in-place slot needs no copy.
  if (dst == src || bytes == 0) return absl::OkStatus();
  return CudaStatus(
      "cudaMemcpyAsync",
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

absl::Status NcclCommunicator::Gather(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckGather(
      *this, send, send_bytes, recv, recv_bytes_per_rank, root, options);
  if (!slices.ok()) return slices.status();
  return Run("gather", options, [&]() -> absl::Status {
    if (rank_ != root) {
      if (send_bytes == 0) return absl::OkStatus();
      return NcclStatus(
          "ncclSend",
          ncclSend(send, send_bytes, ncclUint8, root, comm_, stream_), comm_);
    }
    if (absl::Status s =
            CopyOnDevice(Bytes(recv) + slices->offsets[root], send, send_bytes);
        !s.ok()) {
      return s;
    }
    return Grouped(comm_, [&]() -> absl::Status {
      for (int r = 0; r < size_; ++r) {
        if (r == root || slices->bytes[r] == 0) continue;
        if (absl::Status s = NcclStatus(
                "ncclRecv",
                ncclRecv(Bytes(recv) + slices->offsets[r], slices->bytes[r],
                         ncclUint8, r, comm_, stream_),
                comm_);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  });
}

absl::Status NcclCommunicator::Scatter(
    const void* send, const std::vector<int64_t>& send_bytes_per_rank,
    void* recv, int64_t recv_bytes, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckScatter(
      *this, send, send_bytes_per_rank, recv, recv_bytes, root, options);
  if (!slices.ok()) return slices.status();
  return Run("scatter", options, [&]() -> absl::Status {
    if (rank_ != root) {
      if (recv_bytes == 0) return absl::OkStatus();
      return NcclStatus(
          "ncclRecv",
          ncclRecv(recv, recv_bytes, ncclUint8, root, comm_, stream_), comm_);
    }
    if (absl::Status s =
            CopyOnDevice(recv, Bytes(send) + slices->offsets[root], recv_bytes);
        !s.ok()) {
      return s;
    }
    return Grouped(comm_, [&]() -> absl::Status {
      for (int r = 0; r < size_; ++r) {
        if (r == root || slices->bytes[r] == 0) continue;
        if (absl::Status s = NcclStatus(
                "ncclSend",
                ncclSend(Bytes(send) + slices->offsets[r], slices->bytes[r],
                         ncclUint8, r, comm_, stream_),
                comm_);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
  });
}

absl::Status NcclCommunicator::Broadcast(void* buffer, int64_t bytes, int root,
                                         const CollectiveOptions& options) {
  if (absl::Status s = CheckBroadcast(*this, buffer, bytes, root, options);
      !s.ok()) {
    return s;
  }
  return Run("broadcast", options, [&]() -> absl::Status {
    if (bytes == 0) return absl::OkStatus();
    return NcclStatus(
        "ncclBroadcast",
        ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm_, stream_),
        comm_);
  });
}

absl::Status NcclCommunicator::Barrier(const CollectiveOptions& options) {
  if (absl::Status s = CheckBarrier(options); !s.ok()) return s;
  return Run("barrier", options, [&]() -> absl::Status {
    return NcclStatus("ncclAllReduce",
                      ncclAllReduce(barrier_scratch_, barrier_scratch_, 1,
                                    ncclFloat, ncclSum, comm_, stream_),
                      comm_);
  });
}

}  // namespace summon::server
