"""Watch cost (issue 21): a watch of every parameter of a 256 MiB model,
recorded every step, against a trainer doing real work.

One summond (2 local ranks, FULL_SHARD, 16 units of one 4096x1024 float32
parameter each: 256 MiB, 128 MiB per rank), one trainer process driving
both ranks through mapped shards. Each step does real work between the
OPTIMIZERs, as a trainer does: FORWARD and BACKWARD of a small torch MLP
(one thread, `--mlp-width`, `--mlp-depth`, `--batch`), then in OPTIMIZER the
MLP's SGD step and a scale of every watched shard in place (a real read and
write of the node's 256 MiB, so each record sees new values).

Steps run in alternating blocks without and with a watch of every
parameter (32 bins, every step) in the same run, so both see the same
machine. A watched block's first record makes two passes (the range, then
the bins: docs/operations.md#what-a-watch-costs) and is reported on its
own line; the others bin over the previous record's range. Columns in the
style of nccl-tests: the memcpy anchor of the node's watched bytes, the
record latency (the daemon's `latency_us`: OPTIMIZER's end on every rank to
the record stored), its "vs memcpy" (memcpy time / record time; the
issue's goal is >= 0.5) and the trainer's step time with and without the
watch, with the spread of the plain blocks' medians as the noise floor.

    scripts/python bench/watch_bench.py [--steps 8] [--blocks 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))

import summon  # noqa: E402
import summon.torch as st  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402

UNITS = 16
SHAPE = [4096, 1024]  # 16 MiB of float32 per unit: 256 MiB in all.
WATCHED_BYTES = UNITS * SHAPE[0] * SHAPE[1] * 4
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": f"l{u}", "params": [{"fqn": f"l{u}.w", "shape": SHAPE, "dtype": "float32"}]}
    for u in range(UNITS)]}
LAST_PARAM = f"l{UNITS - 1}.w"


def memcpy_ms(nbytes: int, repeats: int = 5) -> tuple[list[float], float]:
    """memcpy of `nbytes` (numpy's copy, one thread), `repeats` times: the
    wall times and the least CPU time, in ms."""
    source = np.ones(nbytes // 4, np.float32)
    target = np.empty_like(source)
    np.copyto(target, source)  # fault the pages in
    times = []
    cpu = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        start_cpu = time.process_time()
        np.copyto(target, source)
        cpu = min(cpu, (time.process_time() - start_cpu) * 1e3)
        times.append((time.perf_counter() - start) * 1e3)
    return times, cpu


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) process `pid` has used so far, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


class Work:
    """The trainer's own step: a small MLP's forward, backward and SGD step."""

    def __init__(self, width: int, depth: int, batch: int) -> None:
        torch.manual_seed(0)
        layers: list[torch.nn.Module] = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*layers)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        self.inputs = torch.randn(batch, width)
        self.loss: torch.Tensor | None = None

    def forward(self) -> None:
        self.loss = self.model(self.inputs).square().mean()

    def backward(self) -> None:
        assert self.loss is not None
        self.loss.backward()

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad()


def run_steps(trainer: st.Trainer, work: Work, first: int, count: int) -> list[float]:
    """`count` steps from `first`; each step's wall time in ms."""
    views = [trainer.shard_views(rank) for rank in (0, 1)]
    times = []
    for n in range(first, first + count):
        start = time.perf_counter()
        with trainer.step(n) as step:
            work.forward()
            step.backward()
            work.backward()
            step.optimizer()
            work.optimizer_step()
            for rank_views in views:
                for unit in rank_views:
                    unit.params.mul_(0.999)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def wait_for_record(client: summon.Client, step: int) -> list:
    """The last parameter's records once `step`'s is stored (or skipped)."""
    deadline = time.monotonic() + 60
    while True:
        shown = client.show_watch("w256", LAST_PARAM)
        if shown.records and shown.records[-1].step >= step:
            return list(shown.records)
        if time.monotonic() > deadline:
            return list(shown.records)  # the last step was skipped
        time.sleep(0.02)


def percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


def row(what: str, values: list[float], nbytes: int | None = None,
        anchor_ms: float | None = None) -> str:
    median = statistics.median(values)
    size = f"{nbytes:>11}" if nbytes else f"{'-':>11}"
    rate = f"{nbytes / median / 1e6:8.2f}" if nbytes else f"{'-':>8}"
    ratio = f"{anchor_ms / median:9.2f}" if anchor_ms else f"{'-':>9}"
    return (f"  {what:<36} {size} {len(values):>4} {median:9.1f} "
            f"{percentile(values, 90):9.1f} {rate} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8, help="steps per block")
    parser.add_argument("--blocks", type=int, default=3, help="blocks of each kind")
    parser.add_argument("--mlp-width", type=int, default=1024)
    parser.add_argument("--mlp-depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--bins", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the trainer's compute is on its own core
    work = Work(args.mlp_width, args.mlp_depth, args.batch)
    load_before = os.getloadavg()
    anchor, anchor_cpu = memcpy_ms(WATCHED_BYTES)
    plain_blocks: list[list[float]] = []
    watched_blocks: list[list[float]] = []
    first_records: list[float] = []
    steady_records: list[float] = []
    watched_steps = 0
    daemon_cpu = {"plain": 0.0, "watched": 0.0}  # summond's CPU ms per kind
    with tempfile.TemporaryDirectory() as data_dir:
        daemon = LocalDaemon(local_ranks=2, data_dir=data_dir).start()
        try:
            client = summon.Client(daemon.address, timeout=120)
            client.create_model("w256", LAYOUT, init="seeded:1")
            trainer = st.attach(client, "w256", [0, 1], lease_seconds=60)
            run_steps(trainer, work, 1, 2)  # warm the mappings and torch
            step = 3
            pid = daemon.process.pid
            for _ in range(args.blocks):
                used = cpu_ms(pid)
                plain_blocks.append(run_steps(trainer, work, step, args.steps))
                daemon_cpu["plain"] += cpu_ms(pid) - used
                step += args.steps
                client.add_watch("w256", histogram_bins=args.bins)
                used = cpu_ms(pid)
                watched_blocks.append(run_steps(trainer, work, step, args.steps))
                records = wait_for_record(client, step + args.steps - 1)
                daemon_cpu["watched"] += cpu_ms(pid) - used
                step += args.steps
                watched_steps += args.steps
                latencies = [r.latency_us / 1e3 for r in records]
                first_records += latencies[:1]
                steady_records += latencies[1:]
                client.remove_watch("w256")
            trainer.detach()
            client.delete_model("w256")
        finally:
            daemon.close()
    load_after = os.getloadavg()

    plain = [t for block in plain_blocks for t in block]
    watched = [t for block in watched_blocks for t in block]
    recorded = len(first_records) + len(steady_records)
    memcpy = statistics.median(anchor)
    print(f"# watch_bench: 1 node x 2 ranks, {UNITS} float32 params, "
          f"{WATCHED_BYTES} B watched, {args.bins} bins, every step; "
          f"{args.blocks} x {args.steps} steps per kind; trainer work: MLP "
          f"{args.mlp_depth}x{args.mlp_width}, batch {args.batch}, 1 thread")
    print(f"# load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print(f"  {'# what':<36} {'size(B)':>11} {'n':>4} {'p50(ms)':>9} {'p90(ms)':>9} "
          f"{'GB/s':>8} {'vs memcpy':>9}")
    print(row("memcpy of the node's watched bytes", anchor, WATCHED_BYTES, memcpy))
    if steady_records:
        print(row("OPTIMIZER end -> record", steady_records, WATCHED_BYTES, memcpy))
    if first_records:
        print(row("OPTIMIZER end -> first record", first_records, WATCHED_BYTES, memcpy))
    print(row("trainer step, no watch", plain))
    print(row("trainer step, watch of every param", watched))
    medians = [statistics.median(block) for block in plain_blocks]
    change = statistics.median(watched) / statistics.median(plain) - 1
    print(f"# step change with the watch: {change * 100:+.1f} % of the median; "
          f"plain blocks' medians {min(medians):.1f}..{max(medians):.1f} ms "
          f"(the noise floor: {(max(medians) / min(medians) - 1) * 100:.1f} %)")
    print(f"# watched steps recorded: {recorded} of {watched_steps} (the rest were "
          "skipped: the next OPTIMIZER began before the shards were read)")
    # The watch's CPU, whatever the machine's load: summond's CPU time in
    # watched blocks over that in plain ones, per recorded step.
    extra = daemon_cpu["watched"] - daemon_cpu["plain"]
    if recorded:
        print(f"# summond CPU: {daemon_cpu['plain']:.0f} ms in plain blocks, "
              f"{daemon_cpu['watched']:.0f} ms in watched ones: "
              f"{extra / recorded:.1f} ms per record (skipped steps' partial work "
              f"included) vs {anchor_cpu:.1f} ms CPU for the memcpy anchor")


if __name__ == "__main__":
    main()
