"""Watch cost (issue 21): a watch of every parameter of a 256 MiB model,
recorded every step.

One summond (2 local ranks, FULL_SHARD, 16 units of one 4096x1024 float32
parameter each), one trainer process driving both ranks through mapped
shards: each step's OPTIMIZER scales every shard in place (a real read and
write of the node's 256 MiB). Steps run in alternating blocks without and
with the watch, in the same run, so both see the same machine. Reports the
trainer's step time (median, p90) per block kind, the record latency (the
daemon's `latency_us`: OPTIMIZER's end on every rank to the record stored)
and, for scale, a memcpy of 256 MiB on this machine.

    scripts/python bench/watch_bench.py [--steps 10] [--blocks 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))

import summon  # noqa: E402
import summon.torch as st  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402

UNITS = 16
SHAPE = [4096, 1024]  # 16 MiB of float32 per unit: 256 MiB in all.
LAYOUT = {"strategy": "FULL_SHARD", "units": [
    {"fqn": f"l{u}", "params": [{"fqn": f"l{u}.w", "shape": SHAPE, "dtype": "float32"}]}
    for u in range(UNITS)]}


def memcpy_seconds(nbytes: int) -> float:
    source = np.ones(nbytes // 4, np.float32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return best


def run_steps(trainer: st.Trainer, first: int, count: int) -> list[float]:
    views = [trainer.shard_views(rank) for rank in (0, 1)]
    times = []
    for n in range(first, first + count):
        start = time.perf_counter()
        with trainer.step(n) as step:
            step.between()
            step.backward()
            step.optimizer()
            for rank_views in views:
                for unit in rank_views:
                    unit.params.mul_(0.999)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10, help="steps per block")
    parser.add_argument("--blocks", type=int, default=3, help="blocks of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        daemon = LocalDaemon(local_ranks=2, data_dir=data_dir).start()
        try:
            client = summon.Client(daemon.address, timeout=120)
            client.create_model("w256", LAYOUT, init="seeded:1")
            trainer = st.attach(client, "w256", [0, 1], lease_seconds=60)
            run_steps(trainer, 1, 2)  # warm the mappings
            step = 3
            plain: list[float] = []
            watched: list[float] = []
            latencies: list[float] = []
            for _ in range(args.blocks):
                plain += run_steps(trainer, step, args.steps)
                step += args.steps
                client.add_watch("w256", histogram_bins=32)
                watched += run_steps(trainer, step, args.steps)
                last = step + args.steps - 1
                step += args.steps
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    shown = client.show_watch("w256", f"l{UNITS - 1}.w")
                    if shown.records and shown.records[-1].step == last:
                        break
                    time.sleep(0.05)
                # The last parameter's record: every parameter of the step
                # is stored at once, after all of them are computed.
                latencies += [r.latency_us / 1e3 for r in shown.records]
                client.remove_watch("w256")
            trainer.detach()
            client.delete_model("w256")
        finally:
            daemon.close()

    def line(name: str, values: list[float], unit: str = "ms", scale: float = 1e3) -> str:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return (f"{name:<34} n={len(values):<3} median {statistics.median(values) * scale:8.1f} "
                f"{unit}  p90 {p90 * scale:8.1f} {unit}")

    print(f"memcpy of 256 MiB (best of 5): {memcpy_seconds(256 << 20) * 1e3:.1f} ms")
    print(line("trainer step, no watch", plain))
    print(line("trainer step, watch of every param", watched))
    print(line("OPTIMIZER end -> record", latencies, scale=1))
    print(f"watched steps recorded: {len(latencies)} of {len(watched)} (the rest were "
          "skipped: the next OPTIMIZER began before the shards were read)")


if __name__ == "__main__":
    main()
