"""examples/rl_weight_sync.py demo: a real FSDP2 trainer (W = 2, gloo)
publishing every step through summond and two TP ranks pulling their slices,
each checked bit for bit against the full tensors of the same version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_two_inference_ranks_pull_every_published_step() -> None:
    run = subprocess.run([sys.executable, str(REPO / "examples/rl_weight_sync.py"), "demo",
                          "--steps", "2"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = sorted(line for line in run.stdout.splitlines() if line.startswith("tp rank"))
    # The whole output on a mismatch: the four processes share one stdout.
    assert [line.split(",")[0] for line in lines] == [
        "tp rank 0: version 1", "tp rank 0: version 2",
        "tp rank 1: version 1", "tp rank 1: version 2"], run.stdout[-3000:]
    # TP 2 of the example's Llama in bf16: rank 0 holds embed rows 0..95, rank 1 rows 96..149.
    assert all(line.endswith("equal to the full tensors' slices") for line in lines)
    assert "86656 slice bytes" in lines[0] and "75904 slice bytes" in lines[2]
