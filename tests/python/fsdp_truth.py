"""What torch's own FSDP holds on each rank, recorded for test_fsdp_layout_torch.

`record(world, out_dir)` runs `world` gloo CPU processes; each builds `Net`
with summon's seeded values (seed SEED) and wraps it the ways CASES lists,
FSDP2 (`fully_shard`) and FSDP1 (`FullyShardedDataParallel`), then saves per
case and rank what torch chose: for FSDP2 every FSDPParam's
`_sharded_param_data`, `padded_sharded_param_size`, `sharded_size` and shard
dim in `fsdp_params` order; for FSDP1 every FlatParameter's `_fqns`,
`_numels_with_padding`, `_shard_param_infos` and local shard. Nothing here
talks to summond: the test compares these records with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seeded import seeded_float32

SEED = 5
UNITS = ["", "blocks.0", "blocks.1"]  # Parent before child, as summon lists them.


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 5)
        self.norm = torch.nn.LayerNorm(5)
        self.fc2 = torch.nn.Linear(5, 4)


class Net(torch.nn.Module):
    """Shapes that split unevenly over 2 and 4 ranks (10, 5 and 3 rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(4, 3)


def seeded_net() -> Net:
    net = Net()
    with torch.no_grad():
        for name, param in net.named_parameters():
            values = seeded_float32(name, SEED, param.numel())
            param.copy_(torch.from_numpy(values).view(param.shape))
    return net


def dim1_rule(group_size: int) -> Callable[[torch.nn.Parameter], Optional[int]]:
    """Which parameters the dim-1 cases shard on dim 1: 2-d ones whose dim 1
    splits evenly (torch refuses uneven splits there). None: dim 0."""
    return lambda p: 1 if p.ndim == 2 and p.shape[1] % group_size == 0 else None


# name -> (kind, options). FSDP2 options: shard group size S (None: W, a
# 2-d mesh (W / S, S) otherwise), reshard_after_forward, dim-1 placement.
# FSDP1 options: use_orig_params, strategy (HYBRID_SHARD on a (W / 2, 2) mesh).
def cases(world: int) -> dict[str, tuple[str, dict[str, Any]]]:
    found: dict[str, tuple[str, dict[str, Any]]] = {
        "fsdp2": ("fsdp2", {}),
        "fsdp2_no_reshard": ("fsdp2", {"reshard": False}),
        "fsdp2_dim1": ("fsdp2", {"dim1": True}),
    }
    if world == 4:
        found["fsdp2_hsdp"] = ("fsdp2", {"shard_group_size": 2})
        found["fsdp2_hsdp_dim1"] = ("fsdp2", {"shard_group_size": 2, "dim1": True})
    for orig in (True, False):
        for strategy in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"):
            if strategy == "HYBRID_SHARD" and world != 4:
                continue
            found[f"fsdp1_{strategy.lower()}_orig{int(orig)}"] = (
                "fsdp1", {"use_orig_params": orig, "strategy": strategy})
    return found


def _fsdp2(world: int, options: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    size = options.get("shard_group_size")
    mesh = (init_device_mesh("cpu", (world,)) if size is None else
            init_device_mesh("cpu", (world // size, size), mesh_dim_names=("replicate", "shard")))
    group = size or world
    placement = None
    if options.get("dim1"):
        rule = dim1_rule(group)

        def placement(p: torch.nn.Parameter) -> Optional[Shard]:
            return Shard(1) if rule(p) == 1 else None
    net = seeded_net()
    reshard = options.get("reshard", True)
    for block in net.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard,
                    shard_placement_fn=placement)
    fully_shard(net, mesh=mesh, reshard_after_forward=reshard, shard_placement_fn=placement)
    units: dict[str, list[dict[str, Any]]] = {}
    for fqn, module in (("", net), ("blocks.0", net.blocks[0]), ("blocks.1", net.blocks[1])):
        group_state = module._get_fsdp_state()._fsdp_param_group
        params = []
        for fsdp_param in group_state.fsdp_params:
            info = fsdp_param._module_info
            original = getattr(info.module, info.param_name)  # the sharded DTensor now
            params.append({
                "fqn": _fqn_of(net, info.module, info.param_name),
                "data": fsdp_param._sharded_param_data.detach().numpy().copy(),
                "padded": tuple(fsdp_param.padded_sharded_param_size),
                "local": tuple(fsdp_param.sharded_size),
                "dim": fsdp_param.fsdp_placement.dim,
                "shape": tuple(original.shape),
            })
        units[fqn] = params
    return units


def _fqn_of(net: torch.nn.Module, module: torch.nn.Module, name: str) -> str:
    for prefix, candidate in net.named_modules():
        if candidate is module:
            return f"{prefix}.{name}" if prefix else name
    raise KeyError(name)


def _fsdp1(world: int, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    strategy = options["strategy"]
    mesh = (init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
            if strategy == "HYBRID_SHARD" else None)
    wrapped = FSDP(seeded_net(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                   use_orig_params=options["use_orig_params"],
                   sharding_strategy=ShardingStrategy[strategy],
                   device_id=torch.device("cpu"), device_mesh=mesh)
    units: dict[str, dict[str, Any]] = {}
    for name, module in wrapped.named_modules():
        if not isinstance(module, FSDP) or module._handle is None:
            continue
        prefix = ".".join(part for part in name.split(".")
                          if part not in ("_fsdp_wrapped_module", "_fpw_module"))
        flat = module._handle.flat_param
        units[prefix] = {
            "fqns": [f"{prefix}.{f}" if prefix else f for f in flat._fqns],
            "numels_with_padding": list(flat._numels_with_padding),
            "shard_param_infos": [tuple(i) for i in flat._shard_param_infos],
            "data": flat.detach().numpy().copy(),
        }
    return units


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for name, (kind, options) in cases(world).items():
            record = (_fsdp2 if kind == "fsdp2" else _fsdp1)(world, options)
            torch.save(record, Path(out_dir) / f"{name}-{rank}.pt")
            dist.barrier()
    finally:
        dist.destroy_process_group()


def record(world: int, out_dir: Path, port: int) -> dict[str, list[Any]]:
    """Runs the workers; returns case -> [rank 0's record, rank 1's, ...]."""
    mp.spawn(_worker, args=(world, port, str(out_dir)), nprocs=world)
    return {name: [torch.load(out_dir / f"{name}-{rank}.pt", weights_only=False)
                   for rank in range(world)]
            for name in cases(world)}


def unit_bytes(values: list[np.ndarray]) -> bytes:
    return b"".join(np.ascontiguousarray(v, dtype=np.float32).tobytes() for v in values)
