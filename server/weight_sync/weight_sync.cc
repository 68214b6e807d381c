#include "server/weight_sync/weight_sync.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace summon::server {

absl::StatusOr<PublishResult> WeightSync::Publish(const std::string& model,
                                                  int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " is negative"));
  }
  absl::StatusOr<std::shared_ptr<ModelEntry>> found = registry_->Get(model);
  if (!found.ok()) return found.status();
  // Trainers wait outside a step while every node copies: each copy is
  // then the parameters after the same step, never a mix.
  absl::StatusOr<SessionManager::ShardWriteGuard> held =
      sessions_->LockForSnapshot(*found,
                                 absl::StrCat("publish of version ", step));
  if (!held.ok()) return held.status();
  return PublishHeld(model, step, /*copy_ahead=*/false);
}

absl::StatusOr<PublishResult> WeightSync::PublishHeld(const std::string& model,
                                                      int64_t step,
                                                      bool copy_ahead) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " is negative"));
  }
  absl::StatusOr<int64_t> bytes =
      nodes_->PublishEverywhere(model, step, copy_ahead);
  if (!bytes.ok()) return bytes.status();
  return PublishResult{step, store_->Kept(model), *bytes};
}

absl::StatusOr<PlannedRead> WeightSync::Plan(
    const std::string& model, int64_t version,
    const std::vector<SliceRequest>& entries) {
  absl::StatusOr<std::shared_ptr<const VersionSnapshot>> snapshot =
      store_->Acquire(model, version);
  if (!snapshot.ok()) return snapshot.status();
  PlannedRead read;
  read.snapshot = *std::move(snapshot);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string name =
        absl::StrCat("entry ", i, " ('", entries[i].fqn, "')");
    absl::StatusOr<SlicePlan> plan =
        PlanSlice(read.snapshot->spec(), entries[i], options_.node);
    if (!plan.ok()) {
      return absl::Status(plan.status().code(),
                          absl::StrCat(name, ": ", plan.status().message()));
    }
    read.total_bytes = (read.total_bytes + kSliceAlignment - 1) /
                       kSliceAlignment * kSliceAlignment;
    if (plan->bytes > options_.max_read_bytes - read.total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name, ": the answer would pass ", options_.max_read_bytes,
          " bytes (summond --max-read-bytes); ask in smaller batches"));
    }
    read.offsets.push_back(read.total_bytes);
    read.total_bytes += plan->bytes;
    read.slice_bytes += plan->bytes;
    read.entries.push_back(*std::move(plan));
  }
  return read;
}

namespace {

// One batch of pieces on another node, of one or more entries of one
// dtype, their dest elements counted from the start of the range being
// filled: one remote fetch. `entry`: its first piece's, for errors.
struct Fetch {
  int entry = 0;
  int node = 0;
  core::DType dtype = core::DType::kFloat32;
  std::vector<VersionPiece> pieces;
  int64_t bytes = 0;
};

}  // namespace

absl::Status WeightSync::FillRange(const PlannedRead& read, int first, int last,
                                   uint8_t* out, int64_t* peer_bytes) {
  if (first >= last) return absl::OkStatus();
  const VersionSnapshot& snapshot = *read.snapshot;
  const core::Topology& topology = snapshot.spec().groups.topology;
  const int64_t base = read.offsets[first];
  std::vector<std::vector<VersionPiece>> local(last - first);
  // Other nodes' pieces by (node, dtype), across entries: a fetch carries
  // many small entries (a norm's few KiB paid a call of its own before).
  std::map<std::pair<int, core::DType>, std::vector<VersionPiece>> remote;
  for (int i = first; i < last; ++i) {
    const SlicePlan& plan = read.entries[i];
    // Offsets are 16-byte aligned: whole elements of any dtype.
    const int64_t entry_element =
        (read.offsets[i] - base) /
        static_cast<int64_t>(core::ElementSize(plan.dtype));
    for (VersionPiece piece : plan.pieces) {
      const int node = topology.NodeOf(piece.rank);
      if (node == options_.node) {
        local[i - first].push_back(piece);
      } else {
        piece.dest_element += entry_element;
        remote[{node, plan.dtype}].push_back(piece);
      }
    }
  }
  std::vector<Fetch> fetches;
  for (const auto& [where, pieces] : remote) {
    const auto [node, dtype] = where;
    const int64_t element = static_cast<int64_t>(core::ElementSize(dtype));
    const int64_t batch_numel =
        std::max<int64_t>(1, options_.fetch_batch_bytes / element);
    for (std::vector<VersionPiece>& batch :
         CutIntoBatches(pieces, batch_numel)) {
      int64_t numel = 0;
      for (const VersionPiece& piece : batch) numel += piece.numel;
      // The entry whose range holds the batch's first byte.
      const int64_t at = base + batch.front().dest_element * element;
      const int entry =
          static_cast<int>(std::upper_bound(read.offsets.begin() + first,
                                            read.offsets.begin() + last, at) -
                           read.offsets.begin() - 1);
      fetches.push_back(
          Fetch{entry, node, dtype, std::move(batch), numel * element});
    }
  }
  // The first failure of each entry; the lowest entry's is returned.
  absl::Mutex mu;
  std::map<int, absl::Status> failed;  // Guarded by mu.
  auto fail = [&](int entry, absl::Status status) {
    absl::MutexLock lock(&mu);
    failed.emplace(entry, std::move(status));
  };
  std::atomic<bool> stop{false};
  std::atomic<size_t> next{0};
  std::atomic<int64_t> received{0};
  auto fetch_some = [&] {
    for (size_t k = next++; k < fetches.size() && !stop.load(); k = next++) {
      const Fetch& fetch = fetches[k];
      if (absl::Status fetched = nodes_->ReadRemote(
              fetch.node, snapshot.model(), snapshot.version(), fetch.dtype,
              fetch.pieces, out);
          !fetched.ok()) {
        fail(fetch.entry,
             absl::Status(fetched.code(),
                          absl::StrCat("entry ", fetch.entry, ": node ",
                                       fetch.node, ": ", fetched.message())));
        stop = true;
        continue;
      }
      received += fetch.bytes;
    }
  };
  std::vector<std::thread> fetchers;
  const size_t workers =
      std::min<size_t>(std::max(options_.fetches_in_flight, 1), fetches.size());
  for (size_t w = 0; w < workers; ++w) fetchers.emplace_back(fetch_some);
  // This node's pieces meanwhile: the gaps first.
  for (int i = first; i < last; ++i) {
    const SlicePlan& plan = read.entries[i];
    std::memset(out + read.offsets[i] - base + plan.bytes, 0,
                End(read, i) - read.offsets[i] - plan.bytes);
  }
  // Shared among copiers: one thread's copy between shared-memory
  // mappings (the shards, the caller's buffer: 4 KiB pages) ran at about
  // half the rate of two on this project's machine (bench/RESULTS.md,
  // "Weight sync's local pull").
  std::vector<int64_t> element_bytes;
  int64_t local_bytes = 0;
  for (int i = first; i < last; ++i) {
    element_bytes.push_back(
        static_cast<int64_t>(core::ElementSize(read.entries[i].dtype)));
    for (const VersionPiece& piece : local[i - first]) {
      local_bytes += piece.numel * element_bytes.back();
    }
  }
  const int copiers = static_cast<int>(std::clamp<int64_t>(
      local_bytes / std::max<int64_t>(options_.copier_min_bytes, 1), 1,
      std::max(options_.local_copiers, 1)));
  const std::vector<std::vector<EntryPieces>> shares =
      ShareAmongCopiers(local, element_bytes, copiers);
  auto copy_share = [&](const std::vector<EntryPieces>& runs) {
    for (const EntryPieces& run : runs) {
      const int entry = first + run.entry;
      if (stop.load()) return;
      if (absl::Status copied = snapshot.ReadPieces(
              run.pieces, read.entries[entry].dtype, /*scatter=*/true,
              out + read.offsets[entry] - base);
          !copied.ok()) {
        fail(entry, std::move(copied));
        stop = true;
        return;
      }
    }
  };
  std::vector<std::thread> copier_threads;
  for (size_t c = 1; c < shares.size(); ++c) {
    copier_threads.emplace_back(copy_share, std::cref(shares[c]));
  }
  if (!shares.empty()) copy_share(shares[0]);
  for (std::thread& copier : copier_threads) copier.join();
  for (std::thread& fetcher : fetchers) fetcher.join();
  *peer_bytes += received.load();
  store_->counters().peer_bytes_received += received.load();
  absl::MutexLock lock(&mu);
  if (!failed.empty()) return failed.begin()->second;
  return absl::OkStatus();
}
absl::Status WeightSync::Deliver(const PlannedRead& read,
                                 SliceDestination& destination,
                                 int64_t* peer_bytes) {
  // A window's pieces come from several ranks and nodes, fetched
  // concurrently; the window bounds what the answer holds in host memory.
  std::vector<uint8_t> window;
  const int count = static_cast<int>(read.entries.size());
  const int64_t limit = stream_window_bytes();
  for (int first = 0; first < count;) {
    int last = first + 1;
    while (last < count && End(read, last) - read.offsets[first] <= limit) {
      ++last;
    }
    window.resize(End(read, last - 1) - read.offsets[first]);
    if (absl::Status filled =
            FillRange(read, first, last, window.data(), peer_bytes);
        !filled.ok()) {
      return filled;
    }
    if (absl::Status written =
            destination.Write(read.offsets[first], window.data(),
                              static_cast<int64_t>(window.size()));
        !written.ok()) {
      return written;
    }
    first = last;
  }
  return absl::OkStatus();
}

}  // namespace summon::server
