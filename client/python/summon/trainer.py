"""summon.trainer (used as summon.torch): a PyTorch trainer whose shards are
summond's shards.

    import summon, summon.torch as st
    client = summon.Client()
    st.register(client, "lm", model, unit_modules=model.blocks)  # layout + init from model
    trainer = st.attach(client, "lm", ranks=[rank])              # lease kept alive
    views = trainer.shard_views(rank)          # per unit: flat torch tensors in /dev/shm
    with trainer.step(n) as step:              # FORWARD (R3: raise or wait)
        loss = forward(views)
        step.backward()                        # BETWEEN, BACKWARD
        loss.backward()
        step.optimizer()                       # OPTIMIZER; IDLE at exit
        optimizer.step()

Shard memory is mapped with os.open("/dev/shm" + name) + mmap, never with
multiprocessing.shared_memory (whose resource tracker unlinks the segment at
exit and destroys the model). The daemon re-attaches the same segments when
it restarts, so views stay valid across a daemon restart.
"""

from __future__ import annotations

import mmap
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch

from summon import cuda_ipc, shapes
from summon.client import Client
from summon.phases import PhaseKeeper
from summon.errors import SummonError
from summon.messages import (Attachment, Model, PhaseReport, ShardMap, UnitGeneration,
                             UnitShard)

TORCH_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}
_FROM_NAME = {name: dtype for dtype, name in TORCH_DTYPES.items()}

ExternalWriteCallback = Callable[["Trainer", list[UnitGeneration]], None]


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a summon dtype name ("bfloat16" -> torch.bfloat16)."""
    return _FROM_NAME[name]


# Layouts ---------------------------------------------------------------------


def named_parameters_with_ties(module: torch.nn.Module,
                               include_buffers: bool = False) -> list[tuple[str, torch.Tensor]]:
    """Every (fqn, tensor) in named_parameters() order, tied ones repeated under each name."""
    named = []
    for prefix, child in module.named_modules(remove_duplicate=False):
        tensors = list(child._parameters.items())
        if include_buffers:
            tensors += [(n, b) for n, b in child._buffers.items()
                        if n not in child._non_persistent_buffers_set]
        for name, tensor in tensors:
            if tensor is not None:
                named.append((f"{prefix}.{name}" if prefix else name, tensor))
    return named


def _strategy_name(strategy: Any) -> str:
    name = getattr(strategy, "name", strategy)  # torch's ShardingStrategy enum too
    name = str(name).upper()
    return "_HYBRID_SHARD_ZERO2" if name.lstrip("_") == "HYBRID_SHARD_ZERO2" else name


def layout_from_module(module: torch.nn.Module,
                       unit_modules: Iterable[Union[torch.nn.Module, str]] = (),
                       strategy: Any = "FULL_SHARD", use_orig_params: bool = True,
                       include_buffers: bool = False) -> dict:
    """The layout JSON (as a dict) of `module` wrapped FSDP-style.

    Units are the root "" and `unit_modules` (modules of `module` or their
    FQNs), parent before child. Each parameter belongs to the deepest unit
    above it, in named_parameters() order; a tied parameter is stored once,
    under its first name, and its other names are `alias_of` it. Buffers are
    not sharded (FSDP keeps them on every rank) unless `include_buffers`.
    Integer and bool tensors are refused (R14), as are units mixing dtypes.
    """
    module_names: dict[int, str] = {}
    order: dict[str, int] = {}
    for index, (name, child) in enumerate(module.named_modules(remove_duplicate=False)):
        module_names.setdefault(id(child), name)
        order.setdefault(name, index)
    units = {""}
    for unit in unit_modules:
        if isinstance(unit, str):
            if unit not in order:
                raise ValueError(f"unit_modules names '{unit}', which is no module of the model")
            units.add(unit)
        elif id(unit) in module_names:
            units.add(module_names[id(unit)])
        else:
            raise ValueError(f"a unit module ({type(unit).__name__}) is not part of the model")
    ordered_units = sorted(units, key=lambda fqn: order[fqn])

    def unit_of(fqn: str) -> str:
        return max((u for u in units if u == "" or fqn.startswith(u + ".")), key=len)

    entries: dict[str, list[dict]] = {u: [] for u in ordered_units}
    dtypes_of: dict[str, str] = {}
    primary_of: dict[int, tuple[str, str]] = {}  # id(tensor) -> (fqn, unit)
    for fqn, tensor in named_parameters_with_ties(module, include_buffers):
        unit = unit_of(fqn)
        if id(tensor) in primary_of:
            primary, primary_unit = primary_of[id(tensor)]
            if ordered_units.index(primary_unit) > ordered_units.index(unit):
                raise ValueError(
                    f"'{fqn}' (unit '{unit}') is tied to '{primary}' of unit "
                    f"'{primary_unit}', which comes after it: a tied parameter's first "
                    "name must lie in the earlier unit")
            entries[unit].append({"fqn": fqn, "alias_of": primary})
            continue
        if tensor.dtype not in TORCH_DTYPES:
            raise ValueError(
                f"unit '{unit}': parameter '{fqn}' has dtype {tensor.dtype}: only "
                "floating-point parameters can be flattened into a unit (R14)")
        dtype = TORCH_DTYPES[tensor.dtype]
        if dtypes_of.setdefault(unit, dtype) != dtype:
            raise ValueError(f"unit '{unit}' mixes {dtypes_of[unit]} and {dtype} "
                             f"('{fqn}'): a flat parameter has one dtype")
        primary_of[id(tensor)] = (fqn, unit)
        entries[unit].append({"fqn": fqn, "shape": list(tensor.shape), "dtype": dtype})
    return {"strategy": _strategy_name(strategy), "use_orig_params": use_orig_params,
            "units": [{"fqn": u, "params": entries[u]} for u in ordered_units]}


# Shard views -----------------------------------------------------------------


def _map_segment(name: str, size: int) -> Optional[mmap.mmap]:
    if not name or size == 0:
        return None
    fd = os.open("/dev/shm" + name, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)  # MAP_SHARED, read-write
    finally:
        os.close(fd)


def _view(segment: Optional[mmap.mmap], dtype: torch.dtype, offset: Optional[int],
          numel: int) -> Optional[torch.Tensor]:
    if offset is None or segment is None and numel > 0:
        return None
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(segment, dtype=dtype, count=numel, offset=offset)


@dataclass
class UnitView:
    """One rank's shard of one unit, in place in shared memory.

    params / grads: the flat shard (chunk_numel elements of the padded flat
    parameter from shard_flat_offset; grads None without gradient shards).
    param_views / grad_views: per parameter, the 1-D part of it held here
    (elements element_offset..element_offset+numel of the flattened tensor).
    """
    shard: UnitShard
    params: torch.Tensor
    grads: Optional[torch.Tensor]
    param_views: dict[str, torch.Tensor] = field(default_factory=dict)
    grad_views: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return self.shard.unit

    @property
    def dtype(self) -> torch.dtype:
        return torch_dtype(self.shard.dtype)

    @property
    def padded_numel(self) -> int:
        """Elements of the padded flat parameter (group_size * chunk_numel)."""
        return self.shard.group_size * self.shard.chunk_numel

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of every parameter (tied names included) of a full flat parameter,
        e.g. the all-gather of the group's shards; autograd flows through them."""
        tensors = {}
        for param in self.shard.layout:
            view = flat[param.flat_offset:param.flat_offset + param.numel].view(param.shape)
            tensors[param.fqn] = view
            for alias in param.aliases:
                tensors[alias] = view
        return tensors


class ShardViews:
    """Every unit of one rank, mapped from its params (and grads) segment, or,
    for device-placed shards (summond --device cuda), opened through CUDA IPC:
    the tensors are then CUDA tensors over the daemon's device memory."""

    def __init__(self, shard_map: ShardMap):
        self.map = shard_map
        on_device = shard_map.device_ordinal is not None
        if on_device:
            self._params_segment = cuda_ipc.open_allocation(
                shard_map.device_ordinal, shard_map.params_ipc_handle, shard_map.device_bytes)
            self._grads_segment = cuda_ipc.open_allocation(
                shard_map.device_ordinal, shard_map.grads_ipc_handle, shard_map.device_bytes)
        else:
            self._params_segment = _map_segment(shard_map.segment_name,
                                                shard_map.segment_bytes)
            self._grads_segment = _map_segment(shard_map.grads_segment_name,
                                               shard_map.grads_segment_bytes)
        view_of = cuda_ipc.flat_view if on_device else _view
        self.units: dict[str, UnitView] = {}
        for shard in shard_map.units:
            dtype = torch_dtype(shard.dtype)
            params = view_of(self._params_segment, dtype, shard.params_offset,
                             shard.chunk_numel)
            assert params is not None
            grads = view_of(self._grads_segment, dtype, shard.grads_offset, shard.chunk_numel)
            view = UnitView(shard, params, grads)
            for part in shard.params:
                window = slice(part.offset_in_shard, part.offset_in_shard + part.numel)
                view.param_views[part.info.fqn] = params[window]
                if grads is not None:
                    view.grad_views[part.info.fqn] = grads[window]
            self.units[shard.unit] = view

    @property
    def rank(self) -> int:
        return self.map.rank

    def __getitem__(self, unit: str) -> UnitView:
        return self.units[unit]

    def __iter__(self):
        return iter(self.units.values())

    def parameters(self) -> list[torch.Tensor]:
        """The non-empty flat shards as autograd leaves, for an optimizer.

        Each requires grad and its .grad is the unit's gradient shard (when
        the rank has one), so backward accumulates straight into shared
        memory and optimizer.step() updates the shard in place.
        """
        leaves = []
        for view in self.units.values():
            if view.shard.chunk_numel == 0:
                continue
            view.params.requires_grad_()
            if view.grads is not None and view.params.grad is None:
                view.params.grad = view.grads
            leaves.append(view.params)
        return leaves

    def copy_from_module(self, module: torch.nn.Module) -> None:
        """Writes each parameter's slice held by this rank from `module`."""
        tensors = dict(named_parameters_with_ties(module, include_buffers=True))
        with torch.no_grad():
            for view in self.units.values():
                for part in view.shard.params:
                    # The module's tensor must have the layout's shape: a
                    # transposed or short one is refused, not flattened in.
                    shapes.check_whole_write(part.info.fqn, part.info.shape,
                                             tuple(tensors[part.info.fqn].shape))
                    source = tensors[part.info.fqn].detach().reshape(-1)
                    window = source[part.element_offset:part.element_offset + part.numel]
                    view.param_views[part.info.fqn].copy_(window)


def register(client: Client, name: str, module: torch.nn.Module,
             unit_modules: Iterable[Union[torch.nn.Module, str]] = (),
             strategy: Any = "FULL_SHARD", grads: bool = True,
             use_orig_params: bool = True, fill: bool = True) -> Model:
    """Creates model `name` from `module` (init external) with the module's own values.

    The layout comes from layout_from_module; every rank gets gradient
    shards when `grads`. With `fill` this process writes every rank's shard
    from the module's parameters through MapShards and marks the model
    initialised (every rank must be local to the client's daemon). Without
    it the model stays AWAITING_INIT until the attached trainers call
    Trainer.init_from_module.
    """
    layout = layout_from_module(module, unit_modules, strategy, use_orig_params)
    model = client.create_model(name, layout, init="external",
                                grad_ranks="all" if grads else None)
    if not fill:
        return model
    for rank in range(model.world_size):
        ShardViews(client.map_shards(name, rank)).copy_from_module(module)
    client.mark_initialized(name)
    return client.describe_model(name)


# Trainer ---------------------------------------------------------------------

_TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
_TRAINER_DEFAULT: Any = object()  # "the trainer's own `wait`"

class Trainer:
    """An attached trainer process: a lease on `ranks` kept alive in the background.

    wait: how a move into a step blocked by a writable session (R3) behaves:
    None raises SummonError FAILED_PRECONDITION at once; a number of seconds
    waits up to that long (then DEADLINE_EXCEEDED). Per step it can be
    overridden. on_external_write(trainer, units) is called in the training
    thread when a step starts after someone else changed units' shards (an
    inspector's writeback, a checkpoint load: R18), with the units whose
    external-write counter moved, so the trainer refreshes state it derives
    from them. A WatchUnits stream also records such edits as they happen
    (`external_edit` event, `pending_external_writes()`).

    summon never stops a training step (R24): a call summond (or the leader
    behind it) does not answer within `report_timeout` s lets the step go on
    and marks the interlock unknown (`interlock_unknown`), once per outage;
    `wait` never adds to it (it is asked for in slices, each answered within
    `report_timeout`). The heartbeat thread re-establishes the phases once
    summond answers (summon.phases.PhaseKeeper). docs/operations.md says
    what a trainer sees.
    """

    def __init__(self, client: Client, model: str, ranks: Sequence[int],
                 incarnation: Optional[str] = None, lease_seconds: int = 10,
                 wait: Optional[float] = None,
                 on_external_write: Optional[ExternalWriteCallback] = None,
                 watch: bool = True, report_timeout: float = 2.0):
        self.client = client
        self.model = model
        self.ranks = list(ranks)
        self.incarnation = incarnation or (
            f"{socket.gethostname()}-{os.getpid()}-{time.time_ns() // 1_000_000}")
        self.wait = wait
        self.on_external_write = on_external_write
        self.lease_seconds = lease_seconds
        self.report_timeout = report_timeout
        self.attachment: Attachment = client.attach(model, self.ranks, self.incarnation,
                                                    lease_seconds)
        self.lease_error: Optional[SummonError] = None
        # Where the ranks are, and whether summond knows (see the class).
        self._phases = PhaseKeeper(client, model, self.ranks, self.incarnation,
                                   lease_seconds, self.attachment.lease_id, report_timeout)
        self.external_edit = threading.Event()
        self._lock = threading.Lock()
        self._seen = {u.unit: u.external_writes for u in self.attachment.units}
        self._watched = dict(self._seen)
        self._views: dict[int, ShardViews] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(
            target=self._heartbeat_loop,
            args=(max(0.1, self.attachment.lease_seconds / 4.0),),
            name=f"summon-heartbeat-{model}", daemon=True)]
        self._watch = None
        if watch:
            self._threads.append(threading.Thread(target=self._watch_loop,
                                                  name=f"summon-watch-{model}", daemon=True))
        for thread in self._threads:
            thread.start()

    # Background ----------------------------------------------------------------

    def _heartbeat_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                renewal = self.client.renew(self.lease_id,
                                            timeout=min(interval, self.report_timeout))
            except SummonError as error:
                if error.code in _TRANSIENT:
                    self._phases.lose_interlock(error)  # the next move need not try
                    continue
                if not self.interlock_unknown:  # lapsed or revoked: say so, stop
                    self.lease_error = error
                    return
                renewal = None  # lapsed while unreachable: re-attach below
            if renewal is None or renewal.phases_unknown or self.interlock_unknown:
                # Again at once when the training thread moved on meanwhile.
                while not self._phases.reestablish() and not self._stop.is_set():
                    pass

    @property
    def phase(self) -> str:
        """Where this trainer's ranks are (IDLE, FORWARD, ...)."""
        return self._phases.phase

    @property
    def step_number(self) -> Optional[int]:
        return self._phases.step

    @property
    def interlock_unknown(self) -> bool:
        """Whether summond may not know where the ranks are (R24): set when it
        did not answer, cleared once the heartbeat thread re-established them."""
        return self._phases.interlock_unknown

    @property
    def outages(self) -> int:
        """How often summond stopped answering this trainer."""
        return self._phases.outages

    @property
    def report_seconds(self) -> float:
        """Seconds the training thread has spent in phase reports (Step's,
        serve's hooks'), R3 waits included: summon's share of the steps'
        time. An outage adds at most report_timeout to it, once (R24)."""
        return self._phases.held_seconds

    @property
    def lease_id(self) -> str:
        return self._phases.lease_id

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            watch = self.client.watch_units(self.model)
            with self._lock:
                self._watch = watch
            if self._stop.is_set():
                watch.cancel()
                return
            try:
                for units in watch:
                    with self._lock:
                        for unit in units:
                            self._watched[unit.unit] = max(
                                self._watched.get(unit.unit, 0), unit.external_writes)
                        if any(self._watched[u] > self._seen.get(u, 0) for u in self._watched):
                            self.external_edit.set()
            except SummonError as error:
                if error.code == "NOT_FOUND":
                    return  # the model was deleted
            self._stop.wait(0.2)  # the daemon restarts: watch again

    def pending_external_writes(self) -> list[str]:
        """Units WatchUnits saw edited by others since the last step started."""
        with self._lock:
            return [u for u, n in self._watched.items() if n > self._seen.get(u, 0)]

    # Shards ---------------------------------------------------------------------

    def shard_views(self, rank: Optional[int] = None) -> ShardViews:
        """The views of one attached rank (default: the only one), mapped once."""
        if rank is None:
            if len(self.ranks) != 1:
                raise ValueError(f"this trainer drives ranks {self.ranks}: name one")
            rank = self.ranks[0]
        if rank not in self._views:
            self._views[rank] = ShardViews(self.client.map_shards(self.model, rank))
        return self._views[rank]

    def init_from_module(self, module: torch.nn.Module,
                         mark_initialized: Optional[bool] = None) -> None:
        """Writes the module's values into the attached ranks' shards (init external).

        mark_initialized: None marks the model initialised when this trainer
        drives every rank; with several trainer processes, each fills its
        ranks and one calls mark_initialized() once all are done.
        """
        for rank in self.ranks:
            self.shard_views(rank).copy_from_module(module)
        if mark_initialized is None:
            world = self.shard_views(self.ranks[0]).map.world_size
            mark_initialized = sorted(self.ranks) == list(range(world))
        if mark_initialized:
            self.mark_initialized()

    def mark_initialized(self) -> list[UnitGeneration]:
        return self.client.mark_initialized(self.model, self.lease_id)

    # Phases ---------------------------------------------------------------------

    def report(self, phase: str, step: Optional[int] = None,
               wait: Any = _TRAINER_DEFAULT, through: Optional[str] = None,
               publish_step: Optional[int] = None) -> list[PhaseReport]:
        """Moves every attached rank to `phase` (see the class for `wait`);
        through: to that phase first, in the same call (BETWEEN or IDLE);
        publish_step: with OPTIMIZER -> IDLE, publish that version once every
        rank ended the step asking for it (PhaseKeeper.report)."""
        if wait is _TRAINER_DEFAULT:
            wait = self.wait
        deadline_ms = None if wait is None else int(float(wait) * 1000)
        return self._phases.report(phase, step, deadline_ms, through, publish_step)

    def step(self, n: Optional[int] = None,
             wait: Any = _TRAINER_DEFAULT) -> "Step":
        """A training step: FORWARD on entry, IDLE on exit (see Step)."""
        return Step(self, n, wait)

    def _external_writes(self, generations: Iterable[UnitGeneration]) -> None:
        moved = []
        with self._lock:
            for unit in generations:
                if unit.external_writes > self._seen.get(unit.unit, 0):
                    moved.append(unit)
                self._seen[unit.unit] = max(self._seen.get(unit.unit, 0),
                                            unit.external_writes)
                self._watched[unit.unit] = max(self._watched.get(unit.unit, 0),
                                               unit.external_writes)
            if not any(self._watched[u] > self._seen.get(u, 0) for u in self._watched):
                self.external_edit.clear()
        if moved and self.on_external_write is not None:
            self.on_external_write(self, moved)

    # Lifetime -------------------------------------------------------------------

    def detach(self) -> None:
        """Ends the lease (ranks back to IDLE) and stops the background threads."""
        self._stop.set()
        with self._lock:
            if self._watch is not None:
                self._watch.cancel()
        for thread in self._threads:
            thread.join()
        self._phases.close()
        self.client.detach(self.lease_id)

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()


class Step:
    """One training step's phases: FORWARD on entry; between(), backward() and
    optimizer() move on (skipped phases are passed through in order); at exit
    the ranks return to IDLE along legal moves, also after an exception.
    Entering calls the trainer's external-write callback when others edited
    a unit since the last step."""

    def __init__(self, trainer: Trainer, n: Optional[int], wait: Any = _TRAINER_DEFAULT):
        self.trainer = trainer
        self.n = n
        self.wait = wait
        self.reports: list[PhaseReport] = []
        # Set before exit: the end of the step (OPTIMIZER -> IDLE) asks
        # summond to publish this version (Trainer.report's publish_step).
        self.publish: Optional[int] = None

    def _move(self, phase: str, step: Optional[int] = None,
              through: Optional[str] = None) -> None:
        self.reports = self.trainer.report(phase, step, self.wait, through)

    def __enter__(self) -> "Step":
        self._move("FORWARD", self.n)
        if self.reports:  # none while summond is unreachable
            self.trainer._external_writes(self.reports[-1].generations)
        return self

    @property
    def waited_ms(self) -> int:
        """How long the last move waited for writable sessions (R3)."""
        return max((r.waited_ms for r in self.reports), default=0)

    def between(self, defer: bool = False) -> None:
        """defer: summond hears BETWEEN with the next move, or alone within
        summon.phases.DEFER_SECONDS (PhaseKeeper.defer): one call less per
        step where the backward follows at once."""
        if self.trainer.phase == "FORWARD":
            if defer:
                self.trainer._phases.defer("BETWEEN")
            else:
                self._move("BETWEEN")

    def backward(self) -> None:
        if self.trainer.phase == "FORWARD":
            self._move("BACKWARD", through="BETWEEN")  # one call
        elif self.trainer.phase == "BETWEEN":
            self._move("BACKWARD")  # with a deferred BETWEEN, one call too

    def optimizer(self) -> None:
        self.backward()
        if self.trainer.phase == "BACKWARD":
            self._move("OPTIMIZER")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self.trainer.phase == "BETWEEN":
                self.trainer.report("BACKWARD", wait=None if exc_type else self.wait)
            if self.trainer.phase != "IDLE":
                publish = (self.publish if exc_type is None
                           and self.trainer.phase == "OPTIMIZER" else None)
                self.reports = self.trainer.report("IDLE", publish_step=publish)
        except SummonError:
            if exc_type is None:
                raise


def attach(client: Client, model: str, ranks: Sequence[int], **options: Any) -> Trainer:
    """Attaches a trainer process to `ranks` of `model` (see Trainer for options)."""
    return Trainer(client, model, ranks, **options)
