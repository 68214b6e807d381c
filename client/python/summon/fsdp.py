"""What summon.torch.serve needs from a model wrapped by torch's FSDP.

For FSDP1 (`FullyShardedDataParallel`) every unit is one FlatParamHandle:
its local shard is the FlatParameter's padded chunk, summon's flat layout.
For FSDP2 (`fully_shard`) a unit is one `fully_shard` call's parameter
group: its shard is the concatenation of each FSDPParam's zero-padded local
chunk (`_sharded_param_data`), summon's "fsdp2" layout.

`units(module)` finds the units and gives each a binding that can (1) say
the layout entry of the unit, (2) move the unit's local shard into a 1-D
tensor over summond's segment, rebinding FSDP's own sharded tensors to views
of it, so FSDP's all-gathers read from summond's memory and the optimizer
steps in place on it, (3) tell whether FSDP still uses that memory and (4)
copy the reduced gradient shard out after backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

TORCH_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}


def _clean(name: str) -> str:
    """An FQN without FSDP1's and activation checkpointing's wrapper prefixes."""
    for prefix in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.",
                   "_offload_wrapped_module."):
        name = name.replace(prefix, "")
    for suffix in ("._fsdp_wrapped_module", "._checkpoint_wrapped_module",
                   "._offload_wrapped_module"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    if name in ("_fsdp_wrapped_module", "_checkpoint_wrapped_module",
                "_offload_wrapped_module"):
        name = ""
    return name


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _dtype_name(dtype: torch.dtype, what: str) -> str:
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"{what} has dtype {dtype}: summon serves floating-point "
                         "parameters only (R14)")
    return TORCH_DTYPES[dtype]


@dataclass
class Binding:
    """One unit of a wrapped model and how its shard moves into summond's memory."""
    unit: str
    params: list[dict]                 # the layout's parameter entries
    position: int                      # this rank's position in its shard group
    group_size: int
    numel: int                         # elements of this rank's unit shard
    kind: str                          # "flat" or "fsdp2"
    strategy: str
    handle: Any = None                 # FSDP1: FlatParamHandle
    fsdp_params: list = field(default_factory=list)  # FSDP2: FSDPParam, in order
    offsets: list[int] = field(default_factory=list)  # FSDP2: each one's offset
    storage: Optional[torch.Tensor] = None  # the bound 1-D tensor in summond's memory

    # The local shard ----------------------------------------------------------

    def local_shard(self) -> torch.Tensor:
        """This rank's unit shard as FSDP holds it now (a copy for FSDP2)."""
        if self.kind == "flat":
            flat = self.handle.flat_param
            return getattr(flat, "_local_shard", flat.data).reshape(-1)
        if not self.fsdp_params:
            return torch.empty(0)
        return torch.cat([p._sharded_param_data.reshape(-1) for p in self.fsdp_params])

    def bind(self, storage: torch.Tensor, fill: bool) -> None:
        """Makes `storage` (numel elements in summond's segment) FSDP's local shard.

        fill: copy FSDP's current values in first (a new model); else the
        segment's values are adopted (a job resuming from summond's shards).
        """
        if storage.numel() != self.numel:
            raise ValueError(f"unit '{self.unit}': summond's shard has {storage.numel()} "
                             f"elements, FSDP's {self.numel}")
        if self.handle is None and not self.fsdp_params:  # a root without parameters
            self.storage = storage
            return
        with torch.no_grad():
            if fill:
                storage.copy_(self.local_shard())
            if self.kind == "flat":
                self._bind_flat(storage)
            else:
                self._bind_fsdp2(storage)
        self.storage = storage

    def _bind_flat(self, storage: torch.Tensor) -> None:
        handle, flat = self.handle, self.handle.flat_param
        flat.data = storage
        if hasattr(flat, "_local_shard"):  # set at FSDP's lazy init
            flat._local_shard = storage
        if handle._use_orig_params:
            handle._use_sharded_views()
        elif not handle.uses_sharded_strategy:
            # NO_SHARD computes on the flat parameter itself: the module's
            # tensors are views into it.
            handle._use_unsharded_views(as_params=False)

    def _bind_fsdp2(self, storage: torch.Tensor) -> None:
        for param, offset in zip(self.fsdp_params, self.offsets):
            padded = param.padded_sharded_param_size
            data = storage[offset:offset + padded.numel()]
            dim = param.fsdp_placement.dim
            length = param.sharded_size[dim] if param.sharded_size.numel() > 0 else 0
            # FSDP2's own reset_sharded_param does these two assignments when
            # a module's parameter tensor changes (nn.Module._apply).
            param._sharded_param_data = data
            param.sharded_param._local_tensor = data.view(padded).narrow(dim, 0, length)

    def check_offsets(self, placed: dict[str, int]) -> None:
        """FSDP2: each parameter's chunk starts where summond put it (MapShards'
        offset_in_shard by FQN), else FSDP and summon disagree on the layout."""
        primaries = [p["fqn"] for p in self.params if "shape" in p]
        for fqn, offset in zip(primaries, self.offsets):
            if fqn in placed and placed[fqn] != offset:
                raise ValueError(f"unit '{self.unit}': FSDP holds '{fqn}' at element "
                                 f"{offset} of its shard, summond at {placed[fqn]}")

    def bound(self) -> bool:
        """Whether FSDP still reads and steps this unit in summond's memory."""
        if self.storage is None or self.numel == 0:
            return True
        pointer = self.storage.data_ptr()
        if self.kind == "flat":
            flat = self.handle.flat_param
            return getattr(flat, "_local_shard", flat.data).data_ptr() == pointer
        return all(p._sharded_param_data.data_ptr() == pointer + offset *
                   self.storage.element_size()
                   for p, offset in zip(self.fsdp_params, self.offsets))

    # Gradients ----------------------------------------------------------------

    def copy_grads(self, grads: torch.Tensor) -> None:
        """Copies this rank's reduced gradient shard into `grads` (zeros for none)."""
        with torch.no_grad():
            if self.kind == "flat":
                grad = self.handle.sharded_grad if self.handle is not None else None
                if grad is None:
                    grads.zero_()
                else:
                    grads.copy_(grad.reshape(-1))
                return
            for param, offset in zip(self.fsdp_params, self.offsets):
                padded = param.padded_sharded_param_size
                window = grads[offset:offset + padded.numel()]
                grad = param.sharded_param.grad
                window.zero_()
                if grad is not None:
                    local = grad._local_tensor if hasattr(grad, "_local_tensor") else grad
                    dim = param.fsdp_placement.dim
                    window.view(padded).narrow(dim, 0, local.shape[dim]).copy_(local)


# FSDP1 ----------------------------------------------------------------------------


def _fsdp1_units(module: torch.nn.Module, names: dict[int, str]) -> list[Binding]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    bindings = []
    for fsdp_module in FSDP.fsdp_modules(module):
        handle = fsdp_module._handle
        if handle is None:
            continue
        flat = handle.flat_param
        prefix = _clean(names[id(handle._fully_sharded_module)])
        dtype = _dtype_name(flat.dtype, f"unit '{prefix}'")
        params: list[dict] = []
        for fqn, shape in zip(flat._fqns, flat._shapes):
            params.append({"fqn": _join(prefix, _clean(fqn)), "shape": list(shape),
                           "dtype": dtype})
        for shared in flat._shared_param_infos:
            params.append({"fqn": _join(prefix, _clean(_join(shared.module_name,
                                                              shared.param_name))),
                           "alias_of": _join(prefix, _clean(_join(shared.prim_module_name,
                                                                   shared.prim_param_name)))})
        strategy = handle._sharding_strategy.name
        sharded = handle.uses_sharded_strategy
        bindings.append(Binding(
            unit=prefix, params=params, kind="flat", strategy=strategy, handle=handle,
            position=handle.rank if sharded else 0,
            group_size=handle.world_size if sharded else 1,
            numel=getattr(flat, "_local_shard", flat.data).numel()))
    return bindings


def _fsdp1_layout(bindings: list[Binding]) -> dict:
    first = bindings[0].handle
    layout: dict = {"strategy": first._sharding_strategy.name,
                    "use_orig_params": bool(first._use_orig_params)}
    if "HYBRID" in layout["strategy"]:  # shard groups of the shard process group's size
        layout["shard_group_size"] = first.world_size
    compute = first._fwd_bwd_param_dtype
    if compute is not None and compute != first.flat_param.dtype:
        layout["compute_dtype"] = _dtype_name(compute, "the mixed-precision param_dtype")
    for binding in bindings:
        other = binding.handle
        if (other._sharding_strategy != first._sharding_strategy
                or other._use_orig_params != first._use_orig_params
                or other._fwd_bwd_param_dtype != first._fwd_bwd_param_dtype):
            raise ValueError(
                f"unit '{binding.unit}' is wrapped with other options than unit "
                f"'{bindings[0].unit}' (strategy, use_orig_params or mixed precision): "
                "a summon model has one of each")
    return layout


# FSDP2 ----------------------------------------------------------------------------


def _common_ancestor(fqns: list[str]) -> str:
    parts = [fqn.split(".") if fqn else [] for fqn in fqns]
    common = []
    for names in zip(*parts):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    return ".".join(common)


def _fsdp2_units(module: torch.nn.Module, names: dict[int, str]) -> list[Binding]:
    from torch.distributed.fsdp import FSDPModule

    param_names: dict[int, list[str]] = {}
    for fqn, param in module.named_parameters(remove_duplicate=False):
        param_names.setdefault(id(param), []).append(_clean(fqn))
    # fully_shard([a, b]) makes a and b one parameter group (accelerate groups
    # the final norm with the head): one unit, named by the modules' deepest
    # common ancestor, since summond keeps each parameter under its unit.
    groups: dict[int, tuple[Any, list[str]]] = {}
    for child in module.modules():
        if isinstance(child, FSDPModule):
            group = child._get_fsdp_state()._fsdp_param_group
            if group is not None and group.fsdp_params:
                groups.setdefault(id(group), (group, []))[1].append(_clean(names[id(child)]))
    bindings = []
    for group, modules in groups.values():
        unit = _common_ancestor(modules)
        params: list[dict] = []
        offsets: list[int] = []
        numel = 0
        mesh = group.fsdp_params[0].mesh_info
        for param in group.fsdp_params:
            fqns = param_names[id(param.sharded_param)]
            dtype = _dtype_name(param.sharded_param.dtype, f"parameter '{fqns[0]}'")
            entry = {"fqn": fqns[0], "shape": list(param._orig_size), "dtype": dtype}
            if param.fsdp_placement.dim != 0:
                entry["shard_dim"] = param.fsdp_placement.dim
            params.append(entry)
            params += [{"fqn": alias, "alias_of": fqns[0]} for alias in fqns[1:]]
            offsets.append(numel)
            numel += param.padded_sharded_param_size.numel()
            if param.mesh_info.shard_mesh_size != mesh.shard_mesh_size:
                raise ValueError(f"unit '{unit}' shards its parameters over meshes of "
                                 "different sizes: summon's units have one shard group")
        reshard = group.post_forward_mesh_info is not None
        hybrid = getattr(mesh, "replicate_mesh_size", 1) > 1
        strategy = ("HYBRID_SHARD" if reshard else "_HYBRID_SHARD_ZERO2") if hybrid else (
            "FULL_SHARD" if reshard else "SHARD_GRAD_OP")
        bindings.append(Binding(
            unit=unit, params=params, kind="fsdp2", strategy=strategy,
            fsdp_params=list(group.fsdp_params), offsets=offsets, numel=numel,
            position=mesh.shard_mesh_rank, group_size=mesh.shard_mesh_size))
    return bindings


def _fsdp2_layout(bindings: list[Binding], module: torch.nn.Module) -> dict:
    # FSDP2 never reshards the root after forward (it is needed at once in
    # backward), so the root unit says nothing about the model's strategy.
    units = [b.unit for b in bindings]
    if len(set(units)) < len(units):
        raise ValueError(f"two fully_shard groups map to one unit ({sorted(units)}): group "
                         "modules under a parent that has no parameters of its own")
    inner = [b for b in bindings if b.unit != ""] or bindings
    strategies = {b.strategy for b in inner}
    # Units that keep their parameters unsharded between forward and
    # backward beside ones that reshard (accelerate's head group): the model
    # is SHARD_GRAD_OP for summon's rules, the stricter of the two (R4).
    if strategies == {"FULL_SHARD", "SHARD_GRAD_OP"}:
        strategies = {"SHARD_GRAD_OP"}
    if len(strategies) > 1:
        raise ValueError(f"the fully_shard units use different strategies "
                         f"({sorted(strategies)}): a summon model has one")
    layout: dict = {"kind": "fsdp2", "strategy": strategies.pop()}
    if "HYBRID" in layout["strategy"]:
        layout["shard_group_size"] = bindings[0].group_size
    return layout


# Both -----------------------------------------------------------------------------


def units(module: torch.nn.Module) -> tuple[dict, list[Binding]]:
    """The layout JSON (a dict) of a model wrapped by FSDP1 or FSDP2, and its units.

    Units are listed parent before child; FQNs are `named_parameters()`'s
    without wrapper prefixes. Raises ValueError for a module FSDP does not
    wrap, parameters FSDP does not manage, or options summon cannot mirror.
    """
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    names: dict[int, str] = {}  # a module reachable under several names: its first
    for name, child in module.named_modules(remove_duplicate=False):
        names.setdefault(id(child), name)
    if FSDP.fsdp_modules(module):
        bindings = _fsdp1_units(module, names)
        layout = _fsdp1_layout(bindings) if bindings else {}
    elif any(isinstance(child, FSDPModule) for child in module.modules()):
        bindings = _fsdp2_units(module, names)
        layout = _fsdp2_layout(bindings, module) if bindings else {}
    else:
        raise ValueError("serve() takes a model wrapped by fully_shard (FSDP2) or "
                         "FullyShardedDataParallel (FSDP1), after wrapping")
    if not bindings:
        raise ValueError("the wrapped model has no parameters to serve")
    managed = {p["fqn"] for b in bindings for p in b.params}
    unmanaged = [_clean(n) for n, _ in module.named_parameters()
                 if _clean(n) not in managed and not n.endswith("_flat_param")]
    if unmanaged:
        raise ValueError(f"parameters {unmanaged[:3]} are not sharded by FSDP: wrap "
                         "the root module too (fully_shard(model) last)")
    order = {_clean(name): i for i, (name, _) in
             enumerate(module.named_modules(remove_duplicate=False))}
    bindings.sort(key=lambda b: order.get(b.unit, -1))
    if bindings[0].unit != "":  # summon's units hang below a root unit
        bindings.insert(0, Binding(unit="", params=[], position=0, group_size=1, numel=0,
                                   kind=bindings[0].kind, strategy=bindings[0].strategy))
    layout["units"] = [{"fqn": b.unit, "params": b.params} for b in bindings]
    return layout, bindings
