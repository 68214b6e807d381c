#ifndef SUMMON_TESTS_CLUSTER_NODE_TRAINER_H_
#define SUMMON_TESTS_CLUSTER_NODE_TRAINER_H_

// A trainer process of one node of a LocalCluster, as the cluster tests
// drive it over the Trainer service (the C++ client has no trainer calls).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/summon/v1/trainer.grpc.pb.h"

namespace summon::tests {

// A trainer process of one node: the Trainer service of that node's daemon
// and the node's ranks.
struct NodeTrainer {
  int node = 0;
  std::vector<int> ranks;
  std::unique_ptr<v1::Trainer::Stub> stub;
  std::string lease;

  static std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = absl::Seconds(20)) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return context;
  }
  grpc::Status Attach(const std::string& model, const std::string& incarnation,
                      uint32_t lease_seconds, v1::AttachResponse* attached) {
    v1::AttachRequest request;
    request.set_model(model);
    for (int rank : ranks) request.add_ranks(rank);
    request.set_incarnation(incarnation);
    request.set_lease_seconds(lease_seconds);
    grpc::Status status = stub->Attach(Context().get(), request, attached);
    if (status.ok()) lease = attached->lease_id();
    return status;
  }
  grpc::Status Report(const std::string& model, int rank,
                      v1::TrainingPhase phase, int64_t step) const {
    v1::ReportPhaseRequest request;
    request.set_model(model);
    request.set_rank(rank);
    request.set_phase(phase);
    request.set_step(step);
    request.set_lease_id(lease);
    v1::ReportPhaseResponse response;
    return stub->ReportPhase(Context().get(), request, &response);
  }
  // Every phase of `phases` for every rank of this trainer.
  void Walk(const std::string& model,
            const std::vector<v1::TrainingPhase>& phases, int64_t step) const {
    for (v1::TrainingPhase phase : phases) {
      for (int rank : ranks) {
        const grpc::Status status = Report(model, rank, phase, step);
        ASSERT_TRUE(status.ok())
            << "node " << node << " rank " << rank << " "
            << v1::TrainingPhase_Name(phase) << ": " << status.error_message();
      }
    }
  }
  v1::MapShardsResponse Map(const std::string& model, int rank) const {
    v1::MapShardsRequest request;
    request.set_model(model);
    request.set_rank(rank);
    v1::MapShardsResponse response;
    const grpc::Status status =
        stub->MapShards(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
};

// The shard of one rank mapped from /dev/shm as its trainer maps it, to
// write its parameters as an optimizer does.
class MappedShard {
 public:
  explicit MappedShard(const v1::MapShardsResponse& shard)
      : bytes_(shard.segment_bytes()) {
    const int fd = shm_open(shard.segment_name().c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0) << shard.segment_name();
    if (fd < 0) return;
    void* base =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(base, MAP_FAILED);
    if (base != MAP_FAILED) base_ = static_cast<char*>(base);
  }
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;
  ~MappedShard() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  float* Param(const v1::UnitShard& unit, const v1::ParamShard& param) const {
    return reinterpret_cast<float*>(base_ + unit.params_offset()) +
           param.offset_in_shard();
  }
  bool ok() const { return base_ != nullptr; }

 private:
  size_t bytes_;
  char* base_ = nullptr;
};

// Calls visit(rank, param, values) for every parameter of every rank of
// `trainer`, its float32 values mapped writable.
template <typename Visit>
void ForEachParamShard(const NodeTrainer& trainer, const std::string& model,
                       Visit visit) {
  for (int rank : trainer.ranks) {
    const v1::MapShardsResponse shard = trainer.Map(model, rank);
    MappedShard mapped(shard);
    ASSERT_TRUE(mapped.ok());
    for (const v1::UnitShard& unit : shard.units()) {
      for (const v1::ParamShard& param : unit.params()) {
        visit(rank, param, mapped.Param(unit, param));
      }
    }
  }
}

}  // namespace summon::tests

#endif  // SUMMON_TESTS_CLUSTER_NODE_TRAINER_H_
