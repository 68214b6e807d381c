// SummonClient: the Trainer service's calls a tool makes (ReportPhase,
// MapShards).
#include <optional>
#include <string>

#include "client/lib/summon_client.h"
#include "client/lib/summon_client_internal.h"

namespace summon::client {

absl::StatusOr<v1::ReportPhaseResponse> SummonClient::ReportPhase(
    const std::string& model, int32_t rank, v1::TrainingPhase phase,
    std::optional<int64_t> step, std::optional<uint32_t> deadline_ms) const {
  v1::ReportPhaseRequest request;
  request.set_model(model);
  request.set_rank(rank);
  request.set_phase(phase);
  if (step) request.set_step(*step);
  if (deadline_ms) request.set_deadline_ms(*deadline_ms);
  return Unary(*trainer_, &v1::Trainer::Stub::ReportPhase,
               NewContext(absl::Milliseconds(deadline_ms.value_or(0))),
               request);
}

absl::StatusOr<v1::MapShardsResponse> SummonClient::MapShards(
    const std::string& model, int32_t rank) const {
  v1::MapShardsRequest request;
  request.set_model(model);
  request.set_rank(rank);
  return Unary(*trainer_, &v1::Trainer::Stub::MapShards, NewContext(), request);
}

}  // namespace summon::client
