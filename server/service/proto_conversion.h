#ifndef SUMMON_SERVER_SERVICE_PROTO_CONVERSION_H_
#define SUMMON_SERVER_SERVICE_PROTO_CONVERSION_H_

#include <optional>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/model_spec.h"
#include "core/session_rules.h"
#include "core/tensor_stats.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"
#include "summon/v1/summon.pb.h"
#include "summon/v1/trainer.pb.h"

namespace summon::server {

// Between the wire enums and core's. The proto enums list core's values in
// core's order after an UNSPECIFIED zero, which these functions rely on.
// UNSPECIFIED or an unknown number -> INVALID_ARGUMENT naming `field`.
absl::StatusOr<core::DType> DTypeFromProto(int value, absl::string_view field);
v1::DType DTypeToProto(core::DType dtype);
absl::StatusOr<core::Strategy> StrategyFromProto(int value,
                                                 absl::string_view field);
v1::ShardingStrategy StrategyToProto(core::Strategy strategy);
v1::LayoutKind LayoutKindToProto(core::LayoutKind kind);
absl::StatusOr<core::TrainingPhase> PhaseFromProto(int value,
                                                   absl::string_view field);
v1::TrainingPhase PhaseToProto(core::TrainingPhase phase);

// Applies the defaults of docs/design.md#session-options to unset fields.
absl::StatusOr<SessionOptions> SessionOptionsFromProto(
    const v1::SessionOptions& options);
void SessionOptionsToProto(const SessionOptions& options,
                           v1::SessionOptions* out);
void SessionInfoToProto(const SessionInfo& info, v1::Session* out);
void TensorInfoToProto(const core::SessionTensor& tensor, v1::TensorInfo* out);
// The model as clients see it; RankState's trainer fields are the trainer
// service's to fill (TrainerLeases).
void ModelToProto(ModelEntry& model, v1::Model* out);
v1::ModelState ModelStateToProto(ModelHealth health);
// Every parameter of unit `unit` with its shape, flat offset and aliases.
void AppendParameters(const core::ModelSpec& spec, int unit,
                      google::protobuf::RepeatedPtrField<v1::Parameter>* out);
void TensorStatisticsToProto(const core::SessionTensor& tensor,
                             const core::TensorStatistics& stats,
                             v1::TensorStats* out);

}  // namespace summon::server

#endif  // SUMMON_SERVER_SERVICE_PROTO_CONVERSION_H_
