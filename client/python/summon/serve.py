"""summon.torch.serve: a real FSDP job serves its full parameters through summond.

    model = build(); fully_shard(...)          # or FullyShardedDataParallel(model, ...)
    optimizer = torch.optim.AdamW(model.parameters())
    with summon.torch.serve(model, "gpt", optimizer=optimizer) as served:
        for step ...: model(x).sum().backward(); optimizer.step(); optimizer.zero_grad()

Every rank calls serve after wrapping (and after building the optimizer).
Rank 0 creates the model (init external) from the layout FSDP derived;
every rank attaches its own rank and moves its local shard into summond's
segment: FSDP's sharded tensors become views over the mapped segment (see
summon.fsdp), so FSDP's all-gathers read summond's memory and the
optimizer steps it in place. No copy is made per step. Hooks report the
phases: the root's forward pre-hook FORWARD, its forward post-hook BETWEEN,
the first gradient BACKWARD, the optimizer's step pre-hook OPTIMIZER and
its post-hook IDLE (or the next forward, without an optimizer).

publish_every=N (weight sync, docs/api.md#weight-sync): every N-th step
is published as version = the step count, with no call and no meeting of
the ranks of its own: each rank's end-of-step report (OPTIMIZER -> IDLE)
asks for it, and summond publishes when the last rank's report arrives,
before answering it; inference engines then read their slices of it
(summon.sync) while training goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from summon import fsdp
from summon import trainer as st
from summon.client import Client
from summon.errors import SummonError
from summon.messages import Model, UnitGeneration

ExternalWriteCallback = Callable[["Served", list[UnitGeneration]], None]

DEFAULT_WAIT = 60.0

_log = logging.getLogger("summon.torch")


def _same_layout(model: Model, layout: dict) -> Optional[str]:
    """Why the existing model `model` does not fit `layout`, or None."""
    wanted = {u["fqn"]: [(p["fqn"], tuple(p["shape"])) for p in u["params"] if "shape" in p]
              for u in layout["units"]}
    have = {u.fqn: [(p.fqn, tuple(p.shape)) for p in u.params] for u in model.units}
    if wanted != have:
        missing = sorted(set(wanted) ^ set(have))
        return (f"its units differ ({missing[:3]})" if missing
                else "its parameters' names or shapes differ")
    if model.strategy != layout["strategy"]:
        return f"its strategy is {model.strategy}, the job's {layout['strategy']}"
    return None


class Served:
    """A wrapped model whose shards live in summond (see serve)."""

    def __init__(self, module: torch.nn.Module, name: str, client: Client,
                 optimizer: Optional[torch.optim.Optimizer], grads: bool,
                 wait: Optional[float], on_external_write: Optional[ExternalWriteCallback],
                 rank: int, lease_seconds: int, publish_every: int = 0,
                 module_hooks: bool = True, optimizer_events: bool = False):

        self.module = module
        self.name = name
        self.client = client
        self.optimizer = optimizer
        self.rank = rank
        self.grads = grads
        self._owns_client = False
        self.steps = 0          # optimizer steps (forwards without an optimizer)
        self.publish_every = publish_every
        # The last version this rank's end-of-step report asked for with no
        # refusal heard (publish_every); a refusal reaches the rank whose
        # report ended the step, which raises it.
        self.published: Optional[int] = None
        self._wait = wait
        self._on_external_write = on_external_write
        self._step: Optional[st.Step] = None
        self._backward_seen = False
        # Steps are counted when the optimizer step ends (its hooks, or a
        # framework's own events), else per backward.
        self._counts_optimizer = optimizer is not None or optimizer_events
        self.layout, self.bindings = fsdp.units(module)
        self._check_parameters_are_optimized()
        self.created = self._create_or_adopt(rank)
        self.trainer = self._attach(lease_seconds)
        try:
            self._bind()
        except BaseException:
            self.trainer.detach()
            raise
        self._hooks = []
        if module_hooks:
            self._hooks += [
                module.register_forward_pre_hook(self._pre_forward, prepend=True),
                module.register_forward_hook(self._post_forward),
            ]
        if optimizer is not None:
            self._hooks += [optimizer.register_step_pre_hook(self._pre_step),
                            optimizer.register_step_post_hook(self._post_step)]

    # Setup ------------------------------------------------------------------------

    def _check_parameters_are_optimized(self) -> None:
        """The optimizer must hold the module's own Parameter objects: serve keeps
        them and only moves their storage, so its state stays theirs."""
        if self.optimizer is None:
            return
        held = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        mine = {id(p) for p in self.module.parameters()}
        if held and not held & mine:
            raise ValueError("the optimizer holds none of the wrapped module's parameters: "
                             "build it from model.parameters() after wrapping")

    def _create_or_adopt(self, rank: int) -> bool:
        """Rank 0 creates the model, or checks an existing one fits; True if created."""
        created = False
        problem = ""
        if rank == 0:
            # Every failure is broadcast, so the other ranks raise too
            # instead of waiting for rank 0 forever.
            try:
                model = self.client.describe_model(self.name)
                reason = _same_layout(model, self.layout)
                if reason:
                    problem = (f"model '{self.name}' exists in summond and does not fit "
                               f"this job: {reason}; delete it or serve another name")
            except SummonError as error:
                problem = f"summond refused model '{self.name}': {error}"
                if error.code == "NOT_FOUND":
                    try:
                        self.client.create_model(self.name, self.layout, init="external",
                                                 grad_ranks="all" if self.grads else None)
                        created, problem = True, ""
                    except SummonError as refused:
                        problem = f"summond refused model '{self.name}': {refused}"
        flags = [problem, created]
        dist.broadcast_object_list(flags, src=0)
        if flags[0]:
            raise ValueError(flags[0])
        return bool(flags[1])

    def _attach(self, lease_seconds: int) -> Any:
        """Attaches this rank; a restarted job waits (up to `wait` seconds) for
        the lease of the trainer it replaces to lapse."""
        deadline = time.monotonic() + (self._wait or 0.0)
        while True:
            try:
                return st.attach(self.client, self.name, [self.rank], wait=self._wait,
                                 lease_seconds=lease_seconds,
                                 on_external_write=self._external_write)
            except SummonError as error:
                if error.code != "ALREADY_EXISTS" or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def _bind(self) -> None:
        views = self.trainer.shard_views(self.rank)
        fill = views.map.state == "AWAITING_INIT"
        self.shards = views
        for binding in self.bindings:
            view = views[binding.unit]
            if binding.numel and (view.shard.position != binding.position
                                  or view.shard.group_size != binding.group_size):
                raise ValueError(
                    f"unit '{binding.unit}': FSDP puts rank {self.rank} at position "
                    f"{binding.position} of a shard group of {binding.group_size}, "
                    f"summond at {view.shard.position} of {view.shard.group_size}: summon's "
                    "shard groups are consecutive global ranks")
            if self.grads and view.grads is None:
                raise ValueError(f"model '{self.name}' has no gradient shards for rank "
                                 f"{self.rank}: serve it with grads=True from the start")
            if binding.kind == "fsdp2":
                binding.check_offsets({p.info.fqn: p.offset_in_shard for p in view.shard.params})
            binding.bind(view.params, fill)
        dist.barrier()  # every rank filled its shards
        if fill and self.rank == 0:
            self.trainer.mark_initialized()
        dist.barrier()

    # Phases -----------------------------------------------------------------------

    def _external_write(self, trainer: Any, units: list[UnitGeneration]) -> None:
        if self._on_external_write is not None:
            self._on_external_write(self, units)

    def _check_bound(self) -> None:
        for binding in self.bindings:
            if not binding.bound():
                raise RuntimeError(
                    f"unit '{binding.unit}' of model '{self.name}' no longer computes on "
                    "summond's shard: its FSDP tensors were replaced after serve() "
                    "(docs/api.md, the rebinding contract)")

    def _finish_step(self) -> None:
        if self._step is not None:
            step, self._step = self._step, None
            step.__exit__(None, None, None)

    def _pre_forward(self, module: Any, args: Any) -> None:
        if self._step is not None and self.trainer.phase in ("FORWARD", "BETWEEN"):
            return  # a nested call of the root module within one forward
        self._finish_step()  # a step without an optimizer (or accumulation)
        self._check_bound()
        step = st.Step(self.trainer, self.steps + 1, self._wait)
        step.__enter__()
        self._step = step
        self._backward_seen = False

    def _post_forward(self, module: Any, args: Any, output: Any) -> None:
        if self._step is None or self.trainer.phase != "FORWARD":
            return
        tensors = [t for t in tree_flatten(output)[0]
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if not torch.is_grad_enabled() or not tensors:
            self._finish_step()  # evaluation: FORWARD -> IDLE
            if not self._counts_optimizer:
                self.steps += 1
            return
        # summond hears BETWEEN with BACKWARD, one call, when the backward
        # starts within DEFER_SECONDS (summon.phases.PhaseKeeper.defer).
        self._step.between(defer=True)
        torch.autograd.graph.register_multi_grad_hook(tensors, self._backward_starts,
                                                      mode="any")

    def _backward_starts(self, grad: Any) -> None:
        if self._step is None or self._backward_seen:
            return
        self._backward_seen = True
        self._step.backward()
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_ends)

    def _backward_ends(self) -> None:
        if self.grads:
            for binding in self.bindings:
                grads = self.shards[binding.unit].grads
                if grads is not None and binding.numel:
                    binding.copy_grads(grads)
        if not self._counts_optimizer:
            self.steps += 1

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.begin_optimizer_step()

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._step is not None and self.trainer.phase == "OPTIMIZER":
            self.end_step()

    # Phases from a framework's own events (summon.integrations) ---------------------
    # The same transitions the hooks make, for a training loop that announces
    # them itself (Lightning's batch and backward hooks, the Trainer's
    # optimizer events); each is a no-op where the step is not in the phase
    # it follows, so events and hooks may both report.

    def begin_step(self) -> None:
        """FORWARD: a training (or evaluation) batch starts."""
        if self._step is not None and self.trainer.phase in ("FORWARD", "BETWEEN"):
            return
        self._pre_forward(self.module, ())

    def end_forward(self) -> None:
        """BETWEEN: the forward is done, its backward not begun."""
        if self._step is not None and self.trainer.phase == "FORWARD":
            self._step.between(defer=True)

    def begin_backward(self) -> None:
        """BACKWARD: the backward starts (gradients are copied at end_backward)."""
        if self._step is not None and self.trainer.phase in ("FORWARD", "BETWEEN"):
            self._backward_seen = True
            self._step.backward()

    def end_backward(self) -> None:
        """The backward is done: with grads, each rank's reduced gradient goes
        to summond (also counts the step where no optimizer step ends it)."""
        if self._step is not None and self.trainer.phase == "BACKWARD":
            self._backward_ends()

    def begin_optimizer_step(self) -> None:
        """OPTIMIZER: the optimizer steps the shards in place."""
        if self._step is not None and self.trainer.phase == "BACKWARD":
            self._step.optimizer()

    def end_step(self) -> None:
        """IDLE: the step is over (counted if an optimizer step ended it)."""
        if self._step is None:
            return
        counted = self._counts_optimizer and self.trainer.phase == "OPTIMIZER"
        if counted:
            self.steps += 1
        step = self._step
        publish = counted and self.publish_every > 0 and self.steps % self.publish_every == 0
        if publish:
            # summond publishes once every rank's report of this step's end
            # asked for it (ReportPhaseRequest.publish_step): the reports are
            # answered one by one, so no rank waits for another here.
            step.publish = self.steps
        self._finish_step()
        if publish:
            self._published(step)

    def _published(self, step: st.Step) -> None:
        """What summond said of the publish this rank's report asked for."""
        if not step.reports:
            _log.warning("model %s: the end of step %d was not heard by summond; "
                         "version %d is not published", self.name, self.steps, self.steps)
            return
        for report in step.reports:
            if report.publish_error:
                raise SummonError(report.publish_error_code or "UNKNOWN", report.publish_error)
        self.published = self.steps

    # Lifetime -----------------------------------------------------------------------

    def close(self, unbind: bool = True) -> None:
        """Stops serving: hooks off, the rank IDLE, the lease ended.

        unbind: FSDP's shards move back into private memory (a copy), so the
        job may go on training without summon; summond keeps the model and
        its shards as they are now (delete it with client.delete_model).
        """
        if self.trainer is None:
            return
        for hook in self._hooks:
            hook.remove()
        try:
            self._finish_step()
        finally:
            if unbind:
                for binding in self.bindings:
                    if binding.storage is not None and binding.numel:
                        binding.bind(binding.storage.clone(), fill=False)
            self.trainer.detach()
            self.trainer = None  # type: ignore[assignment]
            if self._owns_client:
                self.client.close()

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _refuse_unsharded(module: torch.nn.Module) -> None:
    """A model FSDP does not shard has nothing for summon to serve: every rank
    holds all of it. Said plainly, so a framework's silent fallback to DDP
    (accelerate and the Hugging Face Trainer on a CPU) cannot look like success."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.nn.parallel import DistributedDataParallel as DDP

    if FSDP.fsdp_modules(module) or any(isinstance(m, FSDPModule) for m in module.modules()):
        return
    kind = type(module).__name__
    if isinstance(module, DDP):
        raise ValueError(
            f"serve() refuses a model wrapped by {kind}: DDP keeps the whole model on "
            "every rank, there is no FSDP shard for summon to serve. Shard it with "
            "fully_shard (FSDP2) or FullyShardedDataParallel (FSDP1); note that accelerate "
            "and the Hugging Face Trainer fall back to DDP without a word when FSDP is "
            "asked for on a CPU (docs/api.md, Integrations)")
    raise ValueError(f"serve() refuses a model that FSDP does not shard ({kind}, no "
                     "fully_shard or FullyShardedDataParallel in it): wrap it first, "
                     "then call serve")


def serve(module: torch.nn.Module, name: str, *, client: Optional[Client] = None,
          optimizer: Optional[torch.optim.Optimizer] = None, grads: bool = False,
          wait: Optional[float] = DEFAULT_WAIT,
          on_external_write: Optional[ExternalWriteCallback] = None,
          rank: Optional[int] = None, lease_seconds: int = 10,
          publish_every: int = 0, module_hooks: bool = True,
          optimizer_events: bool = False) -> Served:
    """Serves an FSDP-wrapped model's full parameters through summond (every rank calls it).

    module: the model after fully_shard (FSDP2) or FullyShardedDataParallel
    (FSDP1). name: the summon model; an existing one with the same layout is
    adopted (a restarted job resumes from summond's shards), otherwise rank
    0 creates it. client: default summon.Client() ($SUMMON_SERVER).
    optimizer: its step hooks report OPTIMIZER and IDLE and count steps.
    grads: gradient shards in summond, each rank's reduced gradient copied
    there after backward. wait: seconds a step waits for a writable session
    (R3), None to raise at once. on_external_write(served, units): called as
    a step starts after someone else wrote units' shards. rank: summon's rank
    of this process (default torch's global rank). publish_every: publish
    version `served.steps` after every that many optimizer steps (0: never).
    module_hooks: False when the caller reports forward and backward itself
    (begin_step, end_forward, begin_backward, end_backward). optimizer_events:
    the caller reports the optimizer step (begin_optimizer_step, end_step)
    without passing the optimizer. A model FSDP does not shard (a plain
    module, DistributedDataParallel) is refused with ValueError before summond
    is asked anything.
    """
    _refuse_unsharded(module)
    if not dist.is_initialized():
        raise ValueError("serve() runs in an FSDP job: torch.distributed is not initialized")
    served = Served(module, name, client or Client(), optimizer, grads, wait,
                    on_external_write, dist.get_rank() if rank is None else rank,
                    lease_seconds, publish_every, module_hooks, optimizer_events)
    served._owns_client = client is None
    return served
