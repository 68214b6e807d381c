"""One rank of the torn-read check's FSDP2 job (test_weight_sync_fsdp.py):
trains a small MLP on gloo, serving through summond with publish_every=1,
and after every step writes the SHA-256 of each full parameter as the
trainer sees it (DTensor.full_tensor) to --out (rank 0)."""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import summon
import summon.torch


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--rank", "--world", "--steps"):
        parser.add_argument(flag, type=int, required=True)
    # bench/weight_sync_steps.py: no publishing, and a wider model.
    parser.add_argument("--publish-every", type=int, default=1)
    parser.add_argument("--width", type=int, default=48)
    for flag in ("--run-dir", "--server", "--name", "--out"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.run_dir}/pg-store",
                            rank=args.rank, world_size=args.world)
    mesh = init_device_mesh("cpu", (args.world,))
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(w, 2 * w), nn.GELU(), nn.Linear(2 * w, w - 8),
                          nn.LayerNorm(w - 8))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    client = summon.Client(args.server, timeout=60)
    served = summon.torch.serve(model, args.name, client=client, optimizer=optimizer,
                                publish_every=args.publish_every)
    data = torch.Generator().manual_seed(args.rank)
    sums: dict[int, dict[str, str]] = {}
    step_seconds = []
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        x = torch.randn(16, w, generator=data)
        model(x).square().mean().backward()
        optimizer.step()   # publishes version `step` in its post-hook
        optimizer.zero_grad()
        step_seconds.append(time.perf_counter() - started)
        full = {fqn: p.full_tensor().detach().contiguous().numpy().tobytes()
                for fqn, p in model.named_parameters()}
        sums[step] = {fqn: hashlib.sha256(b).hexdigest() for fqn, b in full.items()}
    served.close()
    if args.rank == 0:
        Path(args.out).write_text(json.dumps({"sums": sums, "published": served.published,
                                               "step_seconds": step_seconds}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
