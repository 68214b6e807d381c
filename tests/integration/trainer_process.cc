// A trainer process for the liveness tests: attaches to ranks of a model
// with a short lease, walks them into FORWARD, prints "forward <lease id>"
// and keeps its lease alive with heartbeats until it is killed.
//
//   trainer_process ADDRESS MODEL INCARNATION LEASE_SECONDS RANK...

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "summon/v1/trainer.grpc.pb.h"

namespace v1 = summon::v1;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s ADDRESS MODEL INCARNATION LEASE_SECONDS RANK...\n",
                 argv[0]);
    return 2;
  }
  auto stub = v1::Trainer::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  v1::AttachRequest attach;
  attach.set_model(argv[2]);
  attach.set_incarnation(argv[3]);
  attach.set_lease_seconds(static_cast<uint32_t>(std::atoi(argv[4])));
  for (int i = 5; i < argc; ++i) attach.add_ranks(std::atoi(argv[i]));
  v1::AttachResponse attached;
  {
    grpc::ClientContext context;
    grpc::Status status = stub->Attach(&context, attach, &attached);
    if (!status.ok()) {
      std::fprintf(stderr, "attach: %s\n", status.error_message().c_str());
      return 1;
    }
  }
  for (int rank : attach.ranks()) {
    v1::ReportPhaseRequest report;
    report.set_model(attach.model());
    report.set_rank(rank);
    report.set_phase(v1::TRAINING_PHASE_FORWARD);
    report.set_step(1);
    report.set_lease_id(attached.lease_id());
    v1::ReportPhaseResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->ReportPhase(&context, report, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "forward: %s\n", status.error_message().c_str());
      return 1;
    }
  }
  std::printf("forward %s\n", attached.lease_id().c_str());
  std::fflush(stdout);
  while (true) {
    absl::SleepFor(absl::Milliseconds(200));
    v1::TrainerHeartbeatRequest beat;
    beat.set_lease_id(attached.lease_id());
    v1::TrainerHeartbeatResponse response;
    grpc::ClientContext context;
    stub->Heartbeat(&context, beat, &response);
  }
}
