"""RL weight sync through summon: an FSDP2 trainer publishes every step, two
tensor-parallel inference ranks pull exactly their slices of each version.

    scripts/python examples/rl_weight_sync.py demo --steps 3

starts a summond (summon.local.LocalDaemon), a W = 2 FSDP2 trainer of a tiny
Llama (transformers, random init, gloo) serving with publish_every=1, and two
inference ranks (TP = 2) as processes. Each inference rank, every step:

    client.wait_version(name, min_step=step, timeout=60)  # the newest >= step
    tensors = dict(summon.sync.pull(client, name, step, plan, tp_rank))

where plan = summon.sync.plan_for(llama_config, tp_size=2, dtype="bfloat16")
names vLLM's parameters (qkv_proj, gate_up_proj, padded embed_tokens, ...);
`summon.sync.load_into(vllm_model, tensors)` would copy them into a live vLLM
model's parameters of that rank. The version of a step is its number, kept
while among the newest `summond --max-versions` (the demo keeps all of them,
so a rank that starts late still pulls every step; an engine that only wants
the newest pulls what wait_version answers). With --check, the rank also reads the full
parameters (a gather, only to check) and compares bit for bit.

The roles run alone too: `train` (under torchrun, SUMMON_SERVER set) and
`infer --tp-rank R` against a running summond.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch

import summon
import summon.sync

CONFIG = dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=150, intermediate_size=96,
              max_position_embeddings=256, tie_word_embeddings=False)
TP = 2


def train(args: argparse.Namespace) -> None:
    """One FSDP2 rank; the optimizer step of every step publishes a version."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    import summon.torch

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    spec = dict(CONFIG)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(spec.pop("model_type"), **spec))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    served = summon.torch.serve(model, args.name, optimizer=optimizer, publish_every=1)
    data = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        tokens = torch.randint(0, CONFIG["vocab_size"], (4, 16), generator=data)
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()  # publishes this step's version right after
        optimizer.zero_grad()
    served.close()
    dist.destroy_process_group()


def infer(args: argparse.Namespace) -> None:
    """One inference rank: pulls its slices of every published step."""
    plan = summon.sync.plan_for(CONFIG, TP, dtype="bfloat16")
    slice_bytes = plan.slice_bytes(args.tp_rank, summon.sync.itemsize)
    with summon.Client(args.server, timeout=60) as client:
        for step in range(1, args.steps + 1):
            client.wait_version(args.name, min_step=step, timeout=120)
            version = step  # this step's own version, even if a newer one is out
            started = time.perf_counter()
            tensors = dict(summon.sync.pull(client, args.name, version, plan, args.tp_rank))
            seconds = time.perf_counter() - started
            line = (f"tp rank {args.tp_rank}: version {version}, {len(tensors)} engine "
                    f"tensors, {slice_bytes} slice bytes in {seconds * 1e3:.1f} ms")
            if args.check:
                line += ", " + check(client, args.name, version, plan, args.tp_rank, tensors)
            # One write of line and newline: the demo's processes share one
            # stdout, and unbuffered (PYTHONUNBUFFERED) print writes the two
            # apart, so another rank's line could land between them.
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def check(client: summon.Client, name: str, version: int, plan: summon.sync.SyncPlan,
          tp_rank: int, tensors: dict[str, torch.Tensor]) -> str:
    """Compares with the plan applied to full tensors read from the same
    version (a full read of every tensor: a check, not the transfer)."""
    full = {fqn: torch.from_numpy(client.read_slices(
                name, version, [summon.SliceRequest(fqn, [(0, n) for n in shape], "float32")])[0])
            for fqn, shape in plan.sources.items()}
    for engine_name, want in summon.sync.apply_plan(plan, tp_rank, full):
        if not torch.equal(tensors[engine_name], want):
            raise SystemExit(f"tp rank {tp_rank}: {engine_name} differs at version {version}")
    return "equal to the full tensors' slices"


def demo(args: argparse.Namespace) -> None:
    from summon.local import LocalDaemon

    with tempfile.TemporaryDirectory() as data_dir:
        daemon = LocalDaemon(local_ranks=2, data_dir=data_dir,
                             extra_args=["--max-versions", str(args.steps)]).start()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            env = dict(os.environ, SUMMON_SERVER=daemon.address, MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), WORLD_SIZE="2")
            me = [sys.executable, os.path.abspath(__file__)]
            common = ["--name", args.name, "--steps", str(args.steps)]
            procs = [subprocess.Popen(me + ["train"] + common,
                                      env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                     for r in range(2)]
            procs += [subprocess.Popen(me + ["infer", "--tp-rank", str(r), "--server",
                                             daemon.address, "--check"] + common, env=env)
                      for r in range(TP)]
            codes = [p.wait(timeout=600) for p in procs]
            if any(codes):
                raise SystemExit(f"exit codes {codes}")
        finally:
            daemon.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["demo", "train", "infer"])
    parser.add_argument("--name", default="policy")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tp-rank", type=int, default=0)
    parser.add_argument("--server", default=os.environ.get("SUMMON_SERVER", "127.0.0.1:7071"))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    {"demo": demo, "train": train, "infer": infer}[args.role](args)


if __name__ == "__main__":
    main()
