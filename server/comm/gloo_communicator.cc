#include "server/comm/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/allgatherv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "server/comm/collective_args.h"

namespace summon::server {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;

std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  return std::max(std::chrono::milliseconds(1),
                  absl::ToChronoMilliseconds(timeout));
}

// Gloo's slots carry 32-bit tags.
// AllGatherAt's slots, apart from Gloo's own collectives' prefixes.
constexpr uint8_t kAllGatherAtSlotPrefix = 0x21;

uint32_t GlooTag(const CollectiveOptions& options) {
  return static_cast<uint32_t>(options.tag);
}

// What is left until `deadline`, for one wait of a multi-wait exchange.
// Never negative: Gloo reads -1 ms as "use the context's default".
std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - Clock::now()));
}

// Gloo reports timeouts and peer failures with the same exception type; a
// failure that came after the whole timeout had passed is a timeout.
absl::Status FailureStatus(absl::string_view what, absl::string_view error,
                           Clock::duration elapsed,
                           std::chrono::milliseconds timeout) {
  if (elapsed >= timeout || absl::StrContains(error, "Timed out")) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, " did not complete within ", timeout.count(), " ms: ", error));
  }
  return absl::UnavailableError(absl::StrCat(what, " failed: ", error));
}

uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }
const uint8_t* Bytes(const void* p) { return static_cast<const uint8_t*>(p); }

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that
// has closed (it timed out or aborted) would raise SIGPIPE and kill the whole
// daemon instead of failing the operation with EPIPE. Ignore SIGPIPE unless
// the process installed a handler of its own.
void IgnoreSigpipeUnlessHandled() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    struct sigaction current = {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Barrier's buffer is internal to its options; the class exposes it so that
// Abort can wake a barrier too.
class WatchableBarrierOptions : public gloo::BarrierOptions {
 public:
  using gloo::BarrierOptions::BarrierOptions;
  UnboundBuffer* unbound_buffer() { return buffer.get(); }
};

}  // namespace

// Makes Abort wake the waits on `buffer` while it is alive. Declare it after
// whatever owns the buffer so that it is unregistered before the buffer dies.
class GlooCommunicator::WatchedBuffer {
 public:
  WatchedBuffer(GlooCommunicator& comm, UnboundBuffer* buffer)
      : comm_(comm), buffer_(buffer) {
    absl::MutexLock lock(&comm_.mu_);
    comm_.waited_on_.push_back(buffer_);
    if (comm_.aborted_) {
      buffer_->abortWaitRecv();
      buffer_->abortWaitSend();
    }
  }
  WatchedBuffer(const WatchedBuffer&) = delete;
  WatchedBuffer& operator=(const WatchedBuffer&) = delete;
  ~WatchedBuffer() {
    absl::MutexLock lock(&comm_.mu_);
    auto& watched = comm_.waited_on_;
    watched.erase(std::find(watched.begin(), watched.end(), buffer_));
  }

 private:
  GlooCommunicator& comm_;
  UnboundBuffer* const buffer_;
};

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    const Spec& spec, gloo::rendezvous::Store& store) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", spec.rank, " is not in a communicator of size ", spec.size));
  }
  if (spec.hostname.empty()) {
    return absl::InvalidArgumentError("hostname is empty");
  }
  if (spec.connect_timeout <= absl::ZeroDuration() ||
      spec.connect_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "connect_timeout must be positive and finite");
  }
  IgnoreSigpipeUnlessHandled();
  const std::chrono::milliseconds timeout = ToGlooTimeout(spec.connect_timeout);
  const Clock::time_point start = Clock::now();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = spec.hostname;
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(spec.rank, spec.size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    return absl::WrapUnique(new GlooCommunicator(std::move(context)));
  } catch (const std::exception& e) {
    return FailureStatus(absl::StrCat("connecting rank ", spec.rank, " of ",
                                      spec.size, " on ", spec.hostname),
                         e.what(), Clock::now() - start, timeout);
  }
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context)
    : context_(std::move(context)),
      rank_(context_->rank),
      size_(context_->size) {}

GlooCommunicator::~GlooCommunicator() = default;

absl::Status GlooCommunicator::Usable() const {
  if (aborted_) return absl::AbortedError("communicator was aborted");
  if (!broken_.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "communicator is broken and must be re-created; ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Run(absl::string_view name,
                                   const CollectiveOptions& options,
                                   absl::FunctionRef<bool()> body) {
  absl::MutexLock serial(&op_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status usable = Usable(); !usable.ok()) return usable;
  }
  const Clock::time_point start = Clock::now();
  bool completed = false;
  std::string error;
  try {
    completed = body();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  absl::MutexLock lock(&mu_);
  if (aborted_) {
    return absl::AbortedError(
        absl::StrCat(name, " (tag ", options.tag, ") aborted on rank ", rank_));
  }
  if (completed) return absl::OkStatus();
  if (error.empty()) error = "a wait was cancelled";
  broken_ = FailureStatus(
      absl::StrCat(name, " (tag ", options.tag, ") on rank ", rank_), error,
      Clock::now() - start, ToGlooTimeout(options.timeout));
  return broken_;
}

absl::Status GlooCommunicator::AllGatherV(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckAllGatherV(
      *this, send, send_bytes, recv, recv_bytes_per_rank, options);
  if (!slices.ok()) return slices.status();
  return Run("allgatherv", options, [&] {
    gloo::AllgathervOptions gloo_options(context_);
    std::unique_ptr<UnboundBuffer> out =
        context_->createUnboundBuffer(recv, slices->total_bytes);
    WatchedBuffer watched(*this, out.get());
    gloo_options.setOutput<uint8_t>(
        std::move(out),
        std::vector<size_t>(slices->bytes.begin(), slices->bytes.end()));
    // Gloo copies the input into this rank's slot; in place needs no copy.
    if (send != Bytes(recv) + slices->offsets[rank_]) {
      gloo_options.setInput<uint8_t>(
          context_->createUnboundBuffer(const_cast<void*>(send), send_bytes));
    }
    gloo_options.setTag(GlooTag(options));
    gloo_options.setTimeout(ToGlooTimeout(options.timeout));
    gloo::allgatherv(gloo_options);
    return true;
  });
}

absl::Status GlooCommunicator::AllGatherAt(void* buffer,
                                           const std::vector<int64_t>& offsets,
                                           const std::vector<int64_t>& bytes,
                                           int part,
                                           const CollectiveOptions& options) {
  if (absl::Status checked =
          CheckAllGatherAt(*this, buffer, offsets, bytes, part, options);
      !checked.ok()) {
    return checked;
  }
  return StreamParts("allgather_at", buffer, {GatherPart{offsets, bytes}}, part,
                     nullptr, options);
}

absl::Status GlooCommunicator::AllGatherAtParts(
    void* buffer, const std::vector<GatherPart>& parts,
    const std::function<absl::Status(int part)>& ready,
    const CollectiveOptions& options) {
  if (absl::Status checked =
          CheckAllGatherAtParts(*this, buffer, parts, options);
      !checked.ok()) {
    return checked;
  }
  return StreamParts("allgather_at_parts", buffer, parts, 0, ready, options);
}

absl::Status GlooCommunicator::StreamParts(
    absl::string_view name, void* buffer, const std::vector<GatherPart>& parts,
    int first_part, const std::function<absl::Status(int part)>& ready,
    const CollectiveOptions& options) {
  int64_t span = 0;
  for (const GatherPart& part : parts) {
    for (size_t r = 0; r < part.bytes.size(); ++r) {
      if (part.bytes[r] > 0) {
        span = std::max(span, part.offsets[r] + part.bytes[r]);
      }
    }
  }
  const int count = static_cast<int>(parts.size());
  if (span == 0) {
    for (int k = 0; k < count && ready != nullptr; ++k) {
      if (absl::Status filled = ready(k); !filled.ok()) return filled;
    }
    return absl::OkStatus();
  }
  absl::Status not_ready;
  absl::Status run = Run(name, options, [&] {
    // A slot of its own per part: the parts of one operation never meet
    // another's messages.
    const uint64_t slot =
        gloo::Slot::build(kAllGatherAtSlotPrefix, GlooTag(options)) +
        static_cast<uint8_t>(first_part);
    const Clock::time_point deadline =
        Clock::now() + ToGlooTimeout(options.timeout);
    std::unique_ptr<UnboundBuffer> whole =
        context_->createUnboundBuffer(buffer, static_cast<size_t>(span));
    WatchedBuffer watched(*this, whole.get());
    // Every part's receives first: a peer's part k+1 can follow its part k
    // at once, whatever this rank is doing.
    int receives = 0;
    for (int k = 0; k < count; ++k) {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || parts[k].bytes[r] == 0) continue;
        whole->recv(r, slot + k, parts[k].offsets[r], parts[k].bytes[r]);
        ++receives;
      }
    }
    int sends = 0;
    for (int k = 0; k < count; ++k) {
      if (ready != nullptr) {
        not_ready = ready(k);
        // Receives are posted that will never be waited for, and peers
        // wait for parts that will never come: closed connections end both
        // at once (peers fail now, not at their deadline).
        if (!not_ready.ok()) {
          context_->closeConnections();
          return false;
        }
      }
      if (parts[k].bytes[rank_] == 0) continue;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        whole->send(r, slot + k, parts[k].offsets[rank_],
                    parts[k].bytes[rank_]);
        ++sends;
      }
    }
    for (int i = 0; i < receives; ++i) {
      if (!whole->waitRecv(Remaining(deadline))) return false;
    }
    for (int i = 0; i < sends; ++i) {
      if (!whole->waitSend(Remaining(deadline))) return false;
    }
    return true;
  });
  // The caller's failure is the news, not the wait it cut short.
  return not_ready.ok() ? run : not_ready;
}

absl::Status GlooCommunicator::Gather(
    const void* send, int64_t send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes_per_rank, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckGather(
      *this, send, send_bytes, recv, recv_bytes_per_rank, root, options);
  if (!slices.ok()) return slices.status();
  return Run("gather", options, [&] {
    const uint64_t slot =
        gloo::Slot::build(gloo::kGatherSlotPrefix, GlooTag(options));
    const Clock::time_point deadline =
        Clock::now() + ToGlooTimeout(options.timeout);
    if (rank_ != root) {
      if (send_bytes == 0) return true;
      std::unique_ptr<UnboundBuffer> in =
          context_->createUnboundBuffer(const_cast<void*>(send), send_bytes);
      WatchedBuffer watched(*this, in.get());
      in->send(root, slot);
      return in->waitSend(Remaining(deadline));
    }
    std::unique_ptr<UnboundBuffer> out =
        context_->createUnboundBuffer(recv, slices->total_bytes);
    WatchedBuffer watched(*this, out.get());
    int posted = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == root || slices->bytes[r] == 0) continue;
      out->recv(r, slot, slices->offsets[r], slices->bytes[r]);
      ++posted;
    }
    CopyHostBytes(Bytes(recv) + slices->offsets[root], send, send_bytes);
    for (int i = 0; i < posted; ++i) {
      if (!out->waitRecv(Remaining(deadline))) return false;
    }
    return true;
  });
}

absl::Status GlooCommunicator::Scatter(
    const void* send, const std::vector<int64_t>& send_bytes_per_rank,
    void* recv, int64_t recv_bytes, int root,
    const CollectiveOptions& options) {
  absl::StatusOr<RankSlices> slices = CheckScatter(
      *this, send, send_bytes_per_rank, recv, recv_bytes, root, options);
  if (!slices.ok()) return slices.status();
  return Run("scatter", options, [&] {
    const uint64_t slot =
        gloo::Slot::build(gloo::kScatterSlotPrefix, GlooTag(options));
    const Clock::time_point deadline =
        Clock::now() + ToGlooTimeout(options.timeout);
    if (rank_ != root) {
      if (recv_bytes == 0) return true;
      std::unique_ptr<UnboundBuffer> out =
          context_->createUnboundBuffer(recv, recv_bytes);
      WatchedBuffer watched(*this, out.get());
      out->recv(root, slot);
      return out->waitRecv(Remaining(deadline));
    }
    std::unique_ptr<UnboundBuffer> in = context_->createUnboundBuffer(
        const_cast<void*>(send), slices->total_bytes);
    WatchedBuffer watched(*this, in.get());
    int posted = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == root || slices->bytes[r] == 0) continue;
      in->send(r, slot, slices->offsets[r], slices->bytes[r]);
      ++posted;
    }
    CopyHostBytes(recv, Bytes(send) + slices->offsets[root], recv_bytes);
    for (int i = 0; i < posted; ++i) {
      if (!in->waitSend(Remaining(deadline))) return false;
    }
    return true;
  });
}

absl::Status GlooCommunicator::Broadcast(void* buffer, int64_t bytes, int root,
                                         const CollectiveOptions& options) {
  if (absl::Status s = CheckBroadcast(*this, buffer, bytes, root, options);
      !s.ok()) {
    return s;
  }
  return Run("broadcast", options, [&] {
    gloo::BroadcastOptions gloo_options(context_);
    std::unique_ptr<UnboundBuffer> out =
        context_->createUnboundBuffer(buffer, bytes);
    WatchedBuffer watched(*this, out.get());
    gloo_options.setOutput<uint8_t>(std::move(out));
    gloo_options.setRoot(root);
    gloo_options.setTag(GlooTag(options));
    gloo_options.setTimeout(ToGlooTimeout(options.timeout));
    gloo::broadcast(gloo_options);
    return true;
  });
}

absl::Status GlooCommunicator::Barrier(const CollectiveOptions& options) {
  if (absl::Status s = CheckBarrier(options); !s.ok()) return s;
  return Run("barrier", options, [&] {
    WatchableBarrierOptions gloo_options(context_);
    WatchedBuffer watched(*this, gloo_options.unbound_buffer());
    gloo_options.setTag(GlooTag(options));
    gloo_options.setTimeout(ToGlooTimeout(options.timeout));
    gloo::barrier(gloo_options);
    return true;
  });
}

void GlooCommunicator::Abort() {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    for (UnboundBuffer* buffer : waited_on_) {
      buffer->abortWaitRecv();
      buffer->abortWaitSend();
    }
  }
  context_->closeConnections();
}

}  // namespace summon::server
