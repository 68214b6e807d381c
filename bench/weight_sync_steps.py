#!/usr/bin/env python3
"""Trainer step time with publish_every=1 vs no publishing, same machine, one
run after the other (issue 32; goal: >= 0.95x). The FSDP2 job of the
torn-read check (tests/python/weight_sync_job.py: 2 gloo ranks, an MLP of
--width, AdamW) serves through one summond; each step's time covers
forward, backward, the optimizer step and, with publishing, what the
publish costs the trainer: since the cut (bench/RESULTS.md, "Step time
with publish, cut") the end-of-step reports ask for it and the last one
waits for the version to be taken (nothing copied), and the next move into
OPTIMIZER finds the version copied ahead in the background; before, a
barrier, rank 0's Publish call and the copy on write in that move.

    scripts/python bench/weight_sync_steps.py --width 1024 --steps 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client/python"))

from summon.local import LocalDaemon  # noqa: E402


def run(width: int, steps: int, publish_every: int) -> list[float]:
    run_dir = Path(tempfile.mkdtemp(prefix="ws-steps-"))
    (run_dir / "d").mkdir()
    with LocalDaemon(local_ranks=2, data_dir=str(run_dir / "d")) as daemon:
        env = dict(os.environ, PYTHONPATH=str(REPO / "client/python"))
        out = run_dir / "out.json"
        ranks = [subprocess.Popen(
            [sys.executable, str(REPO / "tests/python/weight_sync_job.py"), "--rank", str(r),
             "--world", "2", "--steps", str(steps), "--run-dir", str(run_dir),
             "--server", daemon.address, "--name", "mlp", "--out", str(out),
             "--publish-every", str(publish_every), "--width", str(width)], env=env)
            for r in range(2)]
        for rank in ranks:
            assert rank.wait(timeout=600) == 0
        return json.loads(out.read_text())["step_seconds"][2:]  # after warmup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    params = 2 * args.width * args.width * 2
    print(f"# 2 gloo ranks, MLP width {args.width} (~{params / 1e6:.1f} M float32 params), "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    # Alternated, so a change in the machine's load falls on both alike.
    plain, published = [], []
    for _ in range(args.rounds):
        plain += run(args.width, args.steps, 0)
        published += run(args.width, args.steps, 1)
    a, b = statistics.median(plain), statistics.median(published)
    print(f"# median step: no publish {a * 1e3:.1f} ms, publish every step {b * 1e3:.1f} ms: "
          f"{a / b:.2f}x the steps/s")


if __name__ == "__main__":
    main()
