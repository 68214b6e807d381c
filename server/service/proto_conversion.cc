#include "server/service/proto_conversion.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace summon::server {
namespace {

// Wire value = core enumerator + 1; 0 is UNSPECIFIED.
template <typename CoreEnum>
absl::StatusOr<CoreEnum> FromWire(int value, int count,
                                  absl::string_view field) {
  if (value < 1 || value > count) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be set to a known value, got ", value));
  }
  return static_cast<CoreEnum>(value - 1);
}

constexpr int kDTypeCount = static_cast<int>(core::DType::kBool) + 1;
constexpr int kStrategyCount =
    static_cast<int>(core::Strategy::kHybridShardZero2) + 1;
constexpr int kPhaseCount =
    static_cast<int>(core::TrainingPhase::kOptimizer) + 1;

}  // namespace

absl::StatusOr<core::DType> DTypeFromProto(int value, absl::string_view field) {
  return FromWire<core::DType>(value, kDTypeCount, field);
}

v1::DType DTypeToProto(core::DType dtype) {
  return static_cast<v1::DType>(static_cast<int>(dtype) + 1);
}

absl::StatusOr<core::Strategy> StrategyFromProto(int value,
                                                 absl::string_view field) {
  return FromWire<core::Strategy>(value, kStrategyCount, field);
}

v1::ShardingStrategy StrategyToProto(core::Strategy strategy) {
  return static_cast<v1::ShardingStrategy>(static_cast<int>(strategy) + 1);
}

absl::StatusOr<core::TrainingPhase> PhaseFromProto(int value,
                                                   absl::string_view field) {
  return FromWire<core::TrainingPhase>(value, kPhaseCount, field);
}

v1::TrainingPhase PhaseToProto(core::TrainingPhase phase) {
  return static_cast<v1::TrainingPhase>(static_cast<int>(phase) + 1);
}

absl::StatusOr<SessionOptions> SessionOptionsFromProto(
    const v1::SessionOptions& in) {
  SessionOptions options;
  if (in.has_params()) {
    options.scope.params.assign(in.params().fqns().begin(),
                                in.params().fqns().end());
    if (options.scope.params.empty()) {
      return absl::InvalidArgumentError(
          "options.params lists no parameters; omit it to scope the root "
          "module");
    }
  } else if (in.has_module()) {
    options.scope.module_fqn = in.module().fqn();
    options.scope.recurse =
        in.module().has_recurse() ? in.module().recurse() : true;
  }
  options.writeback = in.has_writeback() ? in.writeback() : true;
  options.rank0_only = in.rank0_only();
  options.home_rank = in.has_home_rank() ? in.home_rank() : 0;
  options.offload_to_cpu = in.offload_to_cpu();
  options.with_grads = in.with_grads();
  if (in.read_dtype() != v1::DTYPE_UNSPECIFIED) {
    absl::StatusOr<core::DType> dtype =
        DTypeFromProto(in.read_dtype(), "options.read_dtype");
    if (!dtype.ok()) return dtype.status();
    options.read_dtype = *dtype;
  }
  // Unset: the 60 s default. A lease given is the lease asked for: 0 is
  // refused by the open's checks, not taken for the default.
  if (in.has_lease_seconds()) {
    options.lease = absl::Seconds(in.lease_seconds());
  }
  return options;
}

void SessionOptionsToProto(const SessionOptions& options,
                           v1::SessionOptions* out) {
  if (!options.scope.params.empty()) {
    for (const std::string& fqn : options.scope.params) {
      out->mutable_params()->add_fqns(fqn);
    }
  } else {
    out->mutable_module()->set_fqn(options.scope.module_fqn);
    out->mutable_module()->set_recurse(options.scope.recurse);
  }
  out->set_writeback(options.writeback);
  out->set_rank0_only(options.rank0_only);
  out->set_home_rank(options.home_rank);
  out->set_offload_to_cpu(options.offload_to_cpu);
  out->set_with_grads(options.with_grads);
  if (options.read_dtype.has_value()) {
    out->set_read_dtype(DTypeToProto(*options.read_dtype));
  }
  out->set_lease_seconds(
      static_cast<uint32_t>(absl::ToInt64Seconds(options.lease)));
}

void TensorInfoToProto(const core::SessionTensor& tensor, v1::TensorInfo* out) {
  out->set_fqn(tensor.fqn);
  out->set_dtype(DTypeToProto(tensor.dtype));
  for (int64_t dim : tensor.shape) out->add_shape(dim);
  out->set_numel(tensor.numel);
}

void SessionInfoToProto(const SessionInfo& info, v1::Session* out) {
  out->set_id(info.id);
  out->set_model(info.model);
  out->set_owner(info.owner);
  SessionOptionsToProto(info.options, out->mutable_options());
  switch (info.state) {
    case core::SessionState::kOpening:
      out->set_state(v1::SESSION_STATE_OPENING);
      break;
    case core::SessionState::kOpen:
      out->set_state(v1::SESSION_STATE_OPEN);
      break;
    default:
      out->set_state(v1::SESSION_STATE_CLOSING);
      break;
  }
  for (const auto& [unit, generation] : info.gathered_generations) {
    v1::UnitGeneration* entry = out->add_gathered_generations();
    entry->set_unit(unit);
    entry->set_generation(generation);
  }
  for (const core::SessionTensor& tensor : info.params) {
    TensorInfoToProto(tensor, out->add_params());
    if (info.has_grads) TensorInfoToProto(tensor, out->add_grads());
  }
  out->set_created_at_unix_ms(absl::ToUnixMillis(info.created));
  out->set_expires_at_unix_ms(absl::ToUnixMillis(info.expires));
  out->set_bytes(info.bytes);
  out->set_shared_gather(info.shared_gather);
  out->set_network_bytes(info.network_bytes);
  for (const std::string& warning : info.warnings) out->add_warnings(warning);
}

v1::ModelState ModelStateToProto(ModelHealth health) {
  switch (health) {
    case ModelHealth::kReady:
      return v1::MODEL_STATE_READY;
    case ModelHealth::kAwaitingInit:
      return v1::MODEL_STATE_AWAITING_INIT;
    case ModelHealth::kDegraded:
      return v1::MODEL_STATE_DEGRADED;
    case ModelHealth::kMissingShards:
      return v1::MODEL_STATE_MISSING_SHARDS;
  }
  return v1::MODEL_STATE_UNSPECIFIED;
}

v1::LayoutKind LayoutKindToProto(core::LayoutKind kind) {
  return kind == core::LayoutKind::kFsdp2 ? v1::LAYOUT_KIND_FSDP2
                                          : v1::LAYOUT_KIND_FLAT;
}

void AppendParameters(const core::ModelSpec& spec, int unit,
                      google::protobuf::RepeatedPtrField<v1::Parameter>* out) {
  for (const core::FlatParamEntry& param : spec.units[unit].layout.params()) {
    v1::Parameter* param_out = out->Add();
    v1::TensorInfo* info = param_out->mutable_info();
    info->set_fqn(param.fqn);
    info->set_dtype(DTypeToProto(param.dtype));
    for (int64_t dim : param.shape) info->add_shape(dim);
    info->set_numel(param.numel);
    param_out->set_flat_offset(param.flat_offset);
    if (spec.units[unit].layout.kind() == core::LayoutKind::kFsdp2) {
      param_out->set_shard_dim(param.shard_dim);
      param_out->set_padded_chunk_numel(param.padded_chunk_numel);
    }
    for (const auto& [alias, primary] : spec.aliases) {
      if (primary == param.fqn) param_out->add_aliases(alias);
    }
  }
}

void ModelToProto(ModelEntry& model, v1::Model* out) {
  const core::ModelSpec& spec = model.spec;
  out->set_name(model.name);
  std::string detail;
  out->set_state(ModelStateToProto(HealthOf(model, &detail)));
  out->set_state_detail(detail);
  out->set_strategy(StrategyToProto(spec.groups.declared));
  out->set_effective_strategy(StrategyToProto(spec.groups.effective));
  out->set_use_orig_params(spec.use_orig_params);
  out->set_nodes(spec.groups.topology.nodes);
  out->set_local_ranks(spec.groups.topology.local_ranks);
  out->set_world_size(spec.groups.topology.world_size());
  out->set_group_size(spec.groups.group_size);
  out->set_layout_kind(LayoutKindToProto(spec.kind));
  absl::MutexLock lock(&model.runtime_mu);
  for (size_t u = 0; u < spec.units.size(); ++u) {
    const core::UnitSpec& unit = spec.units[u];
    v1::Unit* unit_out = out->add_units();
    unit_out->set_fqn(unit.fqn);
    if (unit.parent >= 0) unit_out->set_parent(spec.units[unit.parent].fqn);
    unit_out->set_dtype(DTypeToProto(unit.layout.dtype()));
    unit_out->set_unpadded_numel(unit.layout.unpadded_numel());
    unit_out->set_chunk_numel(unit.layout.chunk_numel());
    unit_out->set_generation(model.runtime.units[u].generation);
    if (model.store != nullptr) {
      unit_out->set_external_writes(
          model.store->ExternalWrites(static_cast<int>(u)));
    }
    AppendParameters(spec, static_cast<int>(u), unit_out->mutable_params());
  }
  for (int rank = 0; rank < spec.groups.topology.world_size(); ++rank) {
    v1::RankState* state = out->add_ranks();
    state->set_rank(rank);
    state->set_phase(PhaseToProto(model.runtime.phase_per_rank[rank]));
    if (model.steps[rank].has_value()) state->set_step(*model.steps[rank]);
    state->set_has_grads(model.grads_by_rank[rank]);
  }
}

void TensorStatisticsToProto(const core::SessionTensor& tensor,
                             const core::TensorStatistics& stats,
                             v1::TensorStats* out) {
  TensorInfoToProto(tensor, out->mutable_info());
  out->set_min(stats.min);
  out->set_max(stats.max);
  out->set_mean(stats.mean);
  out->set_l2_norm(stats.l2_norm);
  out->set_nan_count(stats.nan_count);
  out->set_inf_count(stats.inf_count);
  if (stats.histogram.empty()) return;  // Asked for no histogram.
  v1::Histogram* histogram = out->mutable_histogram();
  histogram->set_lower(stats.histogram_lower);
  histogram->set_upper(stats.histogram_upper);
  for (int64_t count : stats.histogram) histogram->add_counts(count);
}

}  // namespace summon::server
