"""What serving costs an FSDP2 training loop, and what an inspector's read costs it.

    PYTHONPATH=client/python python bench/fsdp_overhead.py [--world 2] [--steps 8]

Starts a summond (LocalDaemon) and W gloo ranks on the CPU training one
transformer (about 20 M parameters) with fully_shard. In the same run the
ranks alternate blocks of steps without and with summon.torch.serve
(plain, served, plain, served, ...: `close()` unbinds, the next `serve`
adopts the model), so both see the same machine load. Then, still served,
an inspector process reads one whole unit through a read-only session
(MapSession) again and again while the ranks train; an open refused
because a rank is mid-step (R1) is retried 10 ms later. Prints steps/s both
ways, their ratio, the inspector's read time and bandwidth, and the step
time while it reads; --json writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 16384, 384, 6, 8, 64, 4


def build_model():
    """examples/fsdp2_train.py's GPT at the bench's size (about 27 M parameters)."""
    sys.path.insert(0, str(REPO / "examples"))
    from fsdp2_train import GPT

    return GPT(vocab=VOCAB, dim=DIM, heads=HEADS, layers=LAYERS)


def rank_main(args: argparse.Namespace) -> None:
    """One rank: blocks of timed steps, plain and served alternately."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import summon.torch as st

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = build_model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.Generator().manual_seed(rank)

    def steps(count: int) -> list[float]:
        times = []
        for _ in range(count):
            tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=data)
            start = time.perf_counter()
            logits = model(tokens[:, :-1])
            F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)).backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
        return times

    out = Path(args.out)
    steps(2)  # warm up
    timings: dict[str, list[float]] = {"plain": [], "served": [], "inspected": []}
    hooks = {"seconds": 0.0, "calls": 0}

    def timed(report):  # what serve's hooks spend reporting phases (RPCs)
        def call(*a, **k):
            start = time.perf_counter()
            try:
                return report(*a, **k)
            finally:
                hooks["seconds"] += time.perf_counter() - start
                hooks["calls"] += 1
        return call

    for _ in range(args.rounds):
        timings["plain"] += steps(args.steps)
        with st.serve(model, "bench", optimizer=optimizer) as served:
            served.trainer.report = timed(served.trainer.report)
            timings["served"] += steps(args.steps)
    with st.serve(model, "bench", optimizer=optimizer):
        dist.barrier()
        if rank == 0:
            (out / "inspect").write_text("go")
        dist.barrier()
        timings["inspected"] = steps(args.steps)
        if rank == 0:
            (out / "inspect").unlink()
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        (out / "ranks.json").write_text(json.dumps({"timings": timings, "params": params,
                                                    "hooks": hooks}))
    dist.destroy_process_group()


def inspector_main(args: argparse.Namespace) -> None:
    """Reads unit blocks.0 whole, again and again, while OUT/inspect exists."""
    import summon
    out = Path(args.out)
    while not (out / "inspect").exists():
        time.sleep(0.05)
    reads, refused = [], 0
    with summon.Client(timeout=120) as client:
        while (out / "inspect").exists():
            start = time.perf_counter()
            try:
                session = client.summon_full_params("bench", scope="blocks.0",
                                                    writeback=False).__enter__()
            except summon.SummonError as error:
                # R1: sessions open only while every rank is IDLE or BETWEEN.
                if error.code != "FAILED_PRECONDITION":
                    raise
                refused += 1
                time.sleep(0.01)
                continue
            try:
                with client.map_session(session.id) as mapped:
                    size = sum(mapped.read(fqn).nbytes for fqn in session.keys())
            finally:
                session.__exit__(None, None, None)
            reads.append((time.perf_counter() - start, size))
    (out / "inspector.json").write_text(json.dumps({"reads": reads, "refused": refused}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=2, help="plain/served block pairs")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--role", choices=["rank", "inspector"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "rank":
        return rank_main(args)
    if args.role == "inspector":
        return inspector_main(args)

    from summon.local import LocalDaemon
    with tempfile.TemporaryDirectory(prefix="summon-bench-") as tmp, \
            LocalDaemon(local_ranks=args.world, data_dir=tmp) as daemon:
        env = dict(os.environ, SUMMON_SERVER=daemon.address, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(29500 + os.getpid() % 1000), WORLD_SIZE=str(args.world),
                   PYTHONPATH=str(REPO / "client" / "python"))
        common = [sys.executable, __file__, "--out", tmp, "--steps", str(args.steps),
                  "--rounds", str(args.rounds)]
        inspector = subprocess.Popen(common + ["--role", "inspector"], env=env)
        ranks = [subprocess.Popen(common + ["--role", "rank"],
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(args.world)]
        if any(p.wait() for p in ranks) or inspector.wait():
            raise SystemExit("a rank or the inspector failed")
        figures = report(json.loads((Path(tmp) / "ranks.json").read_text()),
                         json.loads((Path(tmp) / "inspector.json").read_text()), args.world)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))


def report(ranks: dict, inspector: dict, world: int) -> dict:
    timings, reads = ranks["timings"], inspector["reads"]
    median = {k: statistics.median(v) for k, v in timings.items()}
    read_s = statistics.median(t for t, _ in reads) if reads else float("nan")
    read_bytes = reads[0][1] if reads else 0
    figures = {
        "params": ranks["params"], "world": world, "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "plain_steps_per_s": 1 / median["plain"], "served_steps_per_s": 1 / median["served"],
        "ratio": median["plain"] / median["served"],
        "phase_reports_per_step": ranks["hooks"]["calls"] / len(timings["served"]),
        "hook_ms_per_step": ranks["hooks"]["seconds"] * 1e3 / len(timings["served"]),
        "inspected_step_s": median["inspected"], "plain_step_s": median["plain"],
        "inspector_reads": len(reads), "inspector_refused": inspector["refused"],
        "unit_bytes": read_bytes,
        "unit_read_s": read_s, "unit_read_gbps": read_bytes / read_s / 1e9 if reads else 0,
    }
    print(f"FSDP2 W={world}, {ranks['params'] / 1e6:.1f} M parameters, CPU gloo, "
          f"{figures['cpus']} CPUs, load average {figures['load_average']:.1f}")
    print(f"  without serve: {figures['plain_steps_per_s']:.3f} steps/s (median of "
          f"{len(timings['plain'])} steps)")
    print(f"  with serve:    {figures['served_steps_per_s']:.3f} steps/s (median of "
          f"{len(timings['served'])} steps): {figures['ratio']:.3f}x")
    print(f"  serve's hooks: {figures['phase_reports_per_step']:.0f} phase reports per step, "
          f"{figures['hook_ms_per_step']:.2f} ms per step on rank 0 "
          f"({figures['hook_ms_per_step'] / 1e3 / median['plain'] * 100:.2f}% of a plain step)")
    print(f"  inspector: {len(reads)} whole-unit reads of blocks.0 ({read_bytes / 1e6:.1f} MB) "
          f"during training, median {read_s * 1e3:.1f} ms ({figures['unit_read_gbps']:.2f} GB/s "
          f"open + map + copy + close); {inspector['refused']} opens refused mid-step (R1)")
    print(f"  a step overlapping them: {median['inspected'] * 1e3:.0f} ms vs "
          f"{median['plain'] * 1e3:.0f} ms plain "
          f"({(median['inspected'] / median['plain'] - 1) * 100:+.1f}%)")
    return figures


if __name__ == "__main__":
    main()
