"""Plain Python views of summon's messages.

Every RPC wrapper of `summon.Client` returns these frozen dataclasses instead
of protobuf messages. Enums become strings without their proto prefix:
dtypes as core names them ("float32", "bfloat16"), strategies
("FULL_SHARD"), phases ("FORWARD"), model states ("READY") and session states
("OPEN"). `from_proto` builds each from its message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from summon import dtypes
from summon.v1 import status_pb2, summon_pb2, trainer_pb2, types_pb2


def _enum(enum_type, value: int, prefix: str) -> str:
    if value == 0:
        return ""
    return enum_type.Name(value)[len(prefix):]


def strategy_name(value: int) -> str:
    return _enum(types_pb2.ShardingStrategy, value, "SHARDING_STRATEGY_")


def phase_name(value: int) -> str:
    return _enum(types_pb2.TrainingPhase, value, "TRAINING_PHASE_")


def state_name(value: int) -> str:
    return _enum(types_pb2.ModelState, value, "MODEL_STATE_")


def layout_kind_name(value: int) -> str:
    """"flat" or "fsdp2"; a daemon from before layout kinds sends 0: flat."""
    return "fsdp2" if value == types_pb2.LAYOUT_KIND_FSDP2 else "flat"


def _to_enum(enum_type, name: str, prefix: str, what: str) -> int:
    key = str(name).upper().lstrip("_")  # FSDP spells "_HYBRID_SHARD_ZERO2"
    try:
        return enum_type.Value(prefix + key)
    except ValueError:
        names = [n[len(prefix):] for n in enum_type.keys()[1:]]
        raise ValueError(f"unknown {what} {name!r}; one of {', '.join(names)}") from None


def strategy_value(name: str) -> int:
    """FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or (_)HYBRID_SHARD_ZERO2."""
    return _to_enum(types_pb2.ShardingStrategy, name, "SHARDING_STRATEGY_", "strategy")


def phase_value(name: str) -> int:
    """IDLE, FORWARD, BETWEEN, BACKWARD or OPTIMIZER (any case)."""
    return _to_enum(types_pb2.TrainingPhase, name, "TRAINING_PHASE_", "phase")


@dataclass(frozen=True)
class TensorInfo:
    fqn: str
    dtype: str
    shape: tuple[int, ...]
    numel: int

    @classmethod
    def from_proto(cls, m: types_pb2.TensorInfo) -> "TensorInfo":
        return cls(m.fqn, dtypes.name_of(m.dtype), tuple(m.shape), m.numel)


@dataclass(frozen=True)
class Parameter:
    """One original parameter of a unit: where it starts in the flat parameter.

    For an FSDP2 layout, ``flat_offset`` is where its padded chunk starts in
    every rank's unit shard, ``shard_dim`` the dim it is chunked on and
    ``padded_chunk_numel`` the elements that padded chunk takes.
    """
    fqn: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    flat_offset: int
    aliases: tuple[str, ...]
    shard_dim: int = 0
    padded_chunk_numel: int = 0

    @classmethod
    def from_proto(cls, m: types_pb2.Parameter) -> "Parameter":
        return cls(m.info.fqn, dtypes.name_of(m.info.dtype), tuple(m.info.shape),
                   m.info.numel, m.flat_offset, tuple(m.aliases), m.shard_dim,
                   m.padded_chunk_numel)


@dataclass(frozen=True)
class UnitGeneration:
    unit: str
    generation: int
    external_writes: int

    @classmethod
    def from_proto(cls, m: types_pb2.UnitGeneration) -> "UnitGeneration":
        return cls(m.unit, m.generation, m.external_writes)


@dataclass(frozen=True)
class Unit:
    fqn: str
    parent: Optional[str]
    dtype: str
    params: tuple[Parameter, ...]
    unpadded_numel: int
    chunk_numel: int
    generation: int
    external_writes: int

    @classmethod
    def from_proto(cls, m: types_pb2.Unit) -> "Unit":
        return cls(m.fqn, m.parent if m.HasField("parent") else None,
                   dtypes.name_of(m.dtype),
                   tuple(Parameter.from_proto(p) for p in m.params),
                   m.unpadded_numel, m.chunk_numel, m.generation, m.external_writes)


@dataclass(frozen=True)
class RankState:
    rank: int
    phase: str
    step: Optional[int]
    has_grads: bool
    trainer_incarnation: str
    last_event: str

    @classmethod
    def from_proto(cls, m: types_pb2.RankState) -> "RankState":
        return cls(m.rank, phase_name(m.phase), m.step if m.HasField("step") else None,
                   m.has_grads, m.trainer_incarnation, m.last_event)


@dataclass(frozen=True)
class Model:
    name: str
    strategy: str
    effective_strategy: str
    use_orig_params: bool
    nodes: int
    local_ranks: int
    world_size: int
    group_size: int
    units: tuple[Unit, ...]
    ranks: tuple[RankState, ...]
    state: str
    state_detail: str
    layout_kind: str = "flat"  # "flat" (FSDP1) or "fsdp2".

    @classmethod
    def from_proto(cls, m: summon_pb2.Model) -> "Model":
        return cls(m.name, strategy_name(m.strategy), strategy_name(m.effective_strategy),
                   m.use_orig_params, m.nodes, m.local_ranks, m.world_size, m.group_size,
                   tuple(Unit.from_proto(u) for u in m.units),
                   tuple(RankState.from_proto(r) for r in m.ranks),
                   state_name(m.state), m.state_detail, layout_kind_name(m.layout_kind))

    def unit(self, fqn: str) -> Unit:
        for unit in self.units:
            if unit.fqn == fqn:
                return unit
        raise KeyError(fqn)

    @property
    def params(self) -> dict[str, Parameter]:
        """Every primary parameter by FQN, in model order."""
        return {p.fqn: p for unit in self.units for p in unit.params}


@dataclass(frozen=True)
class ModelSummary:
    name: str
    strategy: str
    world_size: int
    unit_count: int
    param_count: int
    numel: int
    open_sessions: int
    state: str
    state_detail: str

    @classmethod
    def from_proto(cls, m: summon_pb2.ModelSummary) -> "ModelSummary":
        return cls(m.name, strategy_name(m.strategy), m.world_size, m.unit_count,
                   m.param_count, m.numel, m.open_sessions, state_name(m.state),
                   m.state_detail)


@dataclass(frozen=True)
class ClusterNode:
    node: int
    address: str
    state: str  # "UP", "DOWN" or "UNKNOWN" (the node asked cannot tell)
    leader: bool
    ranks: tuple[int, ...]  # the global ranks whose shards live on the node

    @classmethod
    def from_proto(cls, m: status_pb2.ClusterNode) -> "ClusterNode":
        return cls(m.node, m.address, _enum(status_pb2.NodeState, m.state, "NODE_STATE_"),
                   m.leader, tuple(range(m.first_rank, m.first_rank + m.local_ranks)))


@dataclass(frozen=True)
class ClusterStatus:
    """The cluster as the node asked sees it (Client.cluster_status)."""
    answered_by: int
    leader: int
    epoch: int
    ready: bool
    detail: str
    nodes: tuple[ClusterNode, ...]
    models: tuple[str, ...]

    @classmethod
    def from_proto(cls, m: status_pb2.ClusterStatus) -> "ClusterStatus":
        return cls(m.answered_by, m.leader, m.epoch, m.ready, m.detail,
                   tuple(ClusterNode.from_proto(n) for n in m.nodes), tuple(m.models))


@dataclass(frozen=True)
class ShardChecksum:
    rank: int
    unit: str
    params: int
    grads: Optional[int]
    generation: int

    @classmethod
    def from_proto(cls, m: summon_pb2.ShardChecksum) -> "ShardChecksum":
        return cls(m.rank, m.unit, m.params, m.grads if m.HasField("grads") else None,
                   m.generation)


@dataclass(frozen=True)
class SaveResult:
    files: tuple[str, ...]
    bytes_written: int


@dataclass(frozen=True)
class LoadResult:
    model: Model
    bytes_read: int


@dataclass(frozen=True)
class SessionOptions:
    """The options in force; `params` is set for a parameter-list scope."""
    scope: str
    recurse: bool
    params: Optional[tuple[str, ...]]
    writeback: bool
    rank0_only: bool
    home_rank: int
    offload_to_cpu: bool
    with_grads: bool
    read_dtype: str
    lease_seconds: int

    @classmethod
    def from_proto(cls, m: types_pb2.SessionOptions) -> "SessionOptions":
        params = tuple(m.params.fqns) if m.WhichOneof("scope") == "params" else None
        return cls(m.module.fqn, m.module.recurse if m.module.HasField("recurse") else True,
                   params, m.writeback if m.HasField("writeback") else True,
                   m.rank0_only, m.home_rank, m.offload_to_cpu, m.with_grads,
                   dtypes.name_of(m.read_dtype), m.lease_seconds)


@dataclass(frozen=True)
class Session:
    id: str
    model: str
    owner: str
    options: SessionOptions
    state: str
    gathered_generations: tuple[UnitGeneration, ...]
    params: tuple[TensorInfo, ...]
    grads: tuple[TensorInfo, ...]
    created_at_unix_ms: int
    expires_at_unix_ms: int
    bytes: int
    shared_gather: bool
    warnings: tuple[str, ...]
    network_bytes: int

    @classmethod
    def from_proto(cls, m: status_pb2.Session) -> "Session":
        return cls(m.id, m.model, m.owner, SessionOptions.from_proto(m.options),
                   status_pb2.SessionState.Name(m.state)[len("SESSION_STATE_"):],
                   tuple(UnitGeneration.from_proto(g) for g in m.gathered_generations),
                   tuple(TensorInfo.from_proto(t) for t in m.params),
                   tuple(TensorInfo.from_proto(t) for t in m.grads),
                   m.created_at_unix_ms, m.expires_at_unix_ms, m.bytes,
                   m.shared_gather, tuple(m.warnings), m.network_bytes)


@dataclass(frozen=True)
class MappedTensor:
    """Where one tensor lies in a session's copy: `byte_offset` into it."""
    info: TensorInfo
    byte_offset: int

    @classmethod
    def from_proto(cls, m: summon_pb2.MappedTensor) -> "MappedTensor":
        return cls(TensorInfo.from_proto(m.info), m.byte_offset)


@dataclass(frozen=True)
class DeviceCopy:
    """One GPU's copy of a session: its CUDA device on the daemon's host, the
    node's ranks whose shards are on it, and its cudaIpcMemHandle_t."""
    device: int
    ranks: tuple[int, ...]
    ipc_handle: bytes

    @classmethod
    def from_proto(cls, m: summon_pb2.DeviceCopy) -> "DeviceCopy":
        return cls(m.device, tuple(m.ranks), m.ipc_handle)


@dataclass(frozen=True)
class DeviceCopyGrant:
    """A session's copies in GPU memory (Client.grant_device_copies): every
    GPU's copy is `copy_bytes` long and laid out as `tensors` say."""
    copy_bytes: int
    tensors: tuple[MappedTensor, ...]
    device_copies: tuple[DeviceCopy, ...]

    @classmethod
    def from_proto(cls, m: summon_pb2.MapSessionResponse) -> "DeviceCopyGrant":
        return cls(m.copy_bytes, tuple(MappedTensor.from_proto(t) for t in m.tensors),
                   tuple(DeviceCopy.from_proto(c) for c in m.device_copies))


@dataclass(frozen=True)
class CloseResult:
    written_back: bool
    bytes_written: int
    generations: tuple[UnitGeneration, ...]
    # Without a writeback, why: "aborted", "read-only session" or "nothing
    # written" (R22).
    reason: str = ""

    @classmethod
    def from_proto(cls, m: summon_pb2.CloseSessionResponse) -> "CloseResult":
        return cls(m.written_back, m.bytes_written,
                   tuple(UnitGeneration.from_proto(g) for g in m.generations), m.reason)


@dataclass(frozen=True)
class Histogram:
    lower: float
    upper: float
    counts: tuple[int, ...]

    @classmethod
    def from_proto_field(cls, m, field: str = "histogram") -> Optional["Histogram"]:
        """`m`'s histogram field, or None where the message has none."""
        if not m.HasField(field):
            return None
        h = getattr(m, field)
        return cls(h.lower, h.upper, tuple(h.counts))


@dataclass(frozen=True)
class TensorStats:
    info: TensorInfo
    min: float
    max: float
    mean: float
    l2_norm: float
    nan_count: int
    inf_count: int
    histogram: Optional[Histogram]

    @classmethod
    def from_proto(cls, m: summon_pb2.TensorStats) -> "TensorStats":
        return cls(TensorInfo.from_proto(m.info), m.min, m.max, m.mean, m.l2_norm,
                   m.nan_count, m.inf_count, Histogram.from_proto_field(m))


# Watches -----------------------------------------------------------------------


@dataclass(frozen=True)
class Watch:
    """A model's watch: `params` the globs as given, `watched` the FQNs they
    matched; `last_step` None before the first record."""
    model: str
    params: tuple[str, ...]
    every: int
    histogram_bins: int
    grads: bool
    watched: tuple[str, ...]
    history: int
    last_step: Optional[int]
    created_by: str
    created_at_unix_ms: int

    @classmethod
    def from_proto(cls, m: summon_pb2.Watch) -> "Watch":
        return cls(m.model, tuple(m.params), m.every, m.histogram_bins, m.grads,
                   tuple(m.watched), m.history, None if m.last_step < 0 else m.last_step,
                   m.created_by, m.created_at_unix_ms)


@dataclass(frozen=True)
class WatchRecord:
    """One watched parameter (or its gradient) at one optimizer step; the
    statistics over its finite elements, `histogram` None without bins."""
    step: int
    recorded_at_unix_ms: int
    numel: int
    l2_norm: float
    mean: float
    min: float
    max: float
    abs_max: float
    nan_count: int
    inf_count: int
    histogram: Optional[Histogram]
    below_range: int
    above_range: int
    latency_us: int

    @classmethod
    def from_proto(cls, m: summon_pb2.WatchRecord) -> "WatchRecord":
        return cls(m.step, m.recorded_at_unix_ms, m.numel, m.l2_norm, m.mean, m.min, m.max,
                   m.abs_max, m.nan_count, m.inf_count, Histogram.from_proto_field(m),
                   m.below_range, m.above_range, m.latency_us)


@dataclass(frozen=True)
class WatchHistory:
    """A watched parameter's records, oldest first; `first_nonfinite_step`
    None while no record held a NaN or Inf."""
    model: str
    param: str
    grad: bool
    records: tuple[WatchRecord, ...]
    first_nonfinite_step: Optional[int]

    @classmethod
    def from_proto(cls, m: summon_pb2.ShowWatchResponse) -> "WatchHistory":
        return cls(m.model, m.param, m.grad,
                   tuple(WatchRecord.from_proto(r) for r in m.records),
                   None if m.first_nonfinite_step < 0 else m.first_nonfinite_step)


# Trainer -----------------------------------------------------------------------


@dataclass(frozen=True)
class Attachment:
    lease_id: str
    lease_seconds: int
    ranks: tuple[RankState, ...]
    previous_incarnation: str
    resumed: bool
    units: tuple[UnitGeneration, ...]
    # The daemon lost track of these ranks' phases: report them again.
    phases_unknown: bool = False

    @classmethod
    def from_proto(cls, m: trainer_pb2.AttachResponse) -> "Attachment":
        return cls(m.lease_id, m.lease_seconds,
                   tuple(RankState.from_proto(r) for r in m.ranks),
                   m.previous_incarnation, m.resumed,
                   tuple(UnitGeneration.from_proto(u) for u in m.units),
                   m.phases_unknown)


@dataclass(frozen=True)
class Renewal:
    units: tuple[UnitGeneration, ...]
    phases_unknown: bool

    @classmethod
    def from_proto(cls, m: trainer_pb2.TrainerHeartbeatResponse) -> "Renewal":
        return cls(tuple(UnitGeneration.from_proto(u) for u in m.units), m.phases_unknown)


@dataclass(frozen=True)
class PhaseReport:
    previous_phase: str
    phase: str
    step: Optional[int]
    waited_ms: int
    generations: tuple[UnitGeneration, ...]
    # Only on the report that ended a step every rank asked to publish
    # (publish_step): the version published, or why not ("" / its code).
    published: Optional[int] = None
    publish_error: str = ""
    publish_error_code: str = ""

    @classmethod
    def from_proto(cls, m: trainer_pb2.ReportPhaseResponse) -> "PhaseReport":
        return cls(phase_name(m.previous_phase), phase_name(m.phase),
                   m.step if m.HasField("step") else None, m.waited_ms,
                   tuple(UnitGeneration.from_proto(g) for g in m.generations),
                   m.published if m.HasField("published") else None,
                   m.publish_error, m.publish_error_code)


@dataclass(frozen=True)
class ParamShard:
    """The part of one parameter held in one rank's shard of a unit.

    ``offset_in_shard`` (elements) is where its storage starts in the unit
    shard; a trainer views ``prod(padded_local_shape)`` elements there with
    ``padded_local_shape`` and owns the leading ``local_shape`` of it (FSDP2:
    the FSDPParam's ``_sharded_param_data`` and ``sharded_size``; flat: both
    are ``(numel,)``).
    """
    info: TensorInfo
    element_offset: int
    numel: int
    offset_in_shard: int
    local_shape: tuple[int, ...] = ()
    padded_local_shape: tuple[int, ...] = ()
    shard_dim: int = 0

    @classmethod
    def from_proto(cls, m: trainer_pb2.ParamShard) -> "ParamShard":
        return cls(TensorInfo.from_proto(m.info), m.element_offset, m.numel,
                   m.offset_in_shard, tuple(m.local_shape),
                   tuple(m.padded_local_shape), m.shard_dim)


@dataclass(frozen=True)
class UnitShard:
    unit: str
    dtype: str
    group_size: int
    position: int
    chunk_numel: int
    params_offset: int
    grads_offset: Optional[int]
    generation: int
    params: tuple[ParamShard, ...]
    shard_flat_offset: int
    unpadded_numel: int
    external_writes: int
    layout: tuple[Parameter, ...]
    kind: str = "flat"  # "flat" (FSDP1) or "fsdp2".

    @classmethod
    def from_proto(cls, m: trainer_pb2.UnitShard) -> "UnitShard":
        return cls(m.unit, dtypes.name_of(m.dtype), m.group_size, m.position,
                   m.chunk_numel, m.params_offset,
                   m.grads_offset if m.HasField("grads_offset") else None,
                   m.generation,
                   tuple(ParamShard.from_proto(p) for p in m.params),
                   m.shard_flat_offset, m.unpadded_numel, m.external_writes,
                   tuple(Parameter.from_proto(p) for p in m.layout),
                   layout_kind_name(m.kind))


@dataclass(frozen=True)
class ShardMap:
    """Where one rank's shards live in shared memory (Trainer.MapShards)."""
    model: str
    rank: int
    world_size: int
    segment_name: str
    segment_bytes: int
    units: tuple[UnitShard, ...]
    grads_segment_name: str
    grads_segment_bytes: int
    state: str
    incarnation: int
    # Device placement (summond --device cuda): the shards are in this GPU's
    # memory, opened through these CUDA IPC handles; None / empty on the host.
    device_ordinal: Optional[int] = None
    params_ipc_handle: bytes = b""
    grads_ipc_handle: bytes = b""
    device_bytes: int = 0

    @classmethod
    def from_proto(cls, m: trainer_pb2.MapShardsResponse) -> "ShardMap":
        return cls(m.model, m.rank, m.world_size, m.segment_name, m.segment_bytes,
                   tuple(UnitShard.from_proto(u) for u in m.units),
                   m.grads_segment_name, m.grads_segment_bytes, state_name(m.state),
                   m.incarnation,
                   m.device_ordinal if m.HasField("device_ordinal") else None,
                   m.params_ipc_handle, m.grads_ipc_handle, m.device_bytes)


@dataclass(frozen=True)
class ReadSlicesStats:
    """What a read moved: the slices' own bytes, and how many of them the
    answering daemon received from other nodes (only the elements needed)."""

    slice_bytes: int
    peer_bytes: int
    # True when the daemon wrote the answer into this process's shared
    # memory; False when it streamed it.
    local_buffer: bool = False
    # True when the daemon copied it into this process's GPU memory
    # (read_slices(device="cuda:N"), summon.cuda_slices).
    cuda_buffer: bool = False
