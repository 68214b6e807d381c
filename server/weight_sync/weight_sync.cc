#include "server/weight_sync/weight_sync.h"

#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

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
  absl::StatusOr<int64_t> bytes = nodes_->PublishEverywhere(model, step);
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

absl::Status WeightSync::Fill(const PlannedRead& read, int entry, uint8_t* out,
                              int64_t* peer_bytes) {
  const SlicePlan& plan = read.entries[entry];
  const VersionSnapshot& snapshot = *read.snapshot;
  const core::Topology& topology = snapshot.spec().groups.topology;
  std::vector<VersionPiece> local;
  std::map<int, std::vector<VersionPiece>> remote;  // By node.
  for (const VersionPiece& piece : plan.pieces) {
    const int node = topology.NodeOf(piece.rank);
    (node == options_.node ? local : remote[node]).push_back(piece);
  }
  if (absl::Status copied =
          snapshot.ReadPieces(local, plan.dtype, /*scatter=*/true, out);
      !copied.ok()) {
    return copied;
  }
  const int64_t element = static_cast<int64_t>(core::ElementSize(plan.dtype));
  for (const auto& [node, pieces] : remote) {
    int64_t numel = 0;
    for (const VersionPiece& piece : pieces) numel += piece.numel;
    std::vector<uint8_t> bytes(numel * element);
    if (absl::Status fetched =
            nodes_->ReadRemote(node, snapshot.model(), snapshot.version(),
                               plan.dtype, pieces, bytes.data());
        !fetched.ok()) {
      return absl::Status(fetched.code(),
                          absl::StrCat("entry ", entry, ": node ", node, ": ",
                                       fetched.message()));
    }
    *peer_bytes += static_cast<int64_t>(bytes.size());
    store_->counters().peer_bytes_received += bytes.size();
    int64_t at = 0;
    for (const VersionPiece& piece : pieces) {
      std::memcpy(out + piece.dest_element * element, bytes.data() + at,
                  piece.numel * element);
      at += piece.numel * element;
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::server
