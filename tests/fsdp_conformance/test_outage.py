"""R24 on a real FSDP2 job served with serve()'s defaults: summond stopped
(SIGSTOP) for 6 s, three times the 2 s bound, after step 2. Every rank's
later steps end while it is stopped, the one that first meets the outage
within the bound, the others at their own pace (once per outage, not per
move), and training equals the same job without a stop."""

from __future__ import annotations

import json
import signal
import tempfile
from pathlib import Path

import torch

import summon
from conftest import assert_session_equals, results, run_job
from summon.local import LocalDaemon

REPORT_TIMEOUT = 2.0  # summon.torch.Trainer's default, which serve keeps
SLACK = 1.0           # the step's own work and gloo
STOP_SECONDS = 6.0
STEPS = 8


def test_serve_with_defaults_never_waits_for_a_stopped_summond(tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="summon-outage-") as data, \
            LocalDaemon(local_ranks=2, data_dir=data).start() as daemon:
        assert daemon.process is not None
        pid = daemon.process.pid
        stopped = {"api": "fsdp2", "name": "outage", "steps": STEPS, "defaults": True,
                   "stop": {"pid": pid, "after": 2, "seconds": STOP_SECONDS}}
        plain = {"api": "fsdp2", "name": "outage-plain", "steps": STEPS, "serve": False}
        try:
            run_job(daemon, 2, [stopped, plain], tmp_path)
        finally:
            daemon.process.send_signal(signal.SIGCONT)  # never leave it stopped
        start, end = json.loads((tmp_path / "outage.stopped.json").read_text())
        assert end - start >= STOP_SECONDS
        for rank in range(2):
            ends = json.loads((tmp_path / f"outage.ends{rank}.json").read_text())
            assert len(ends) == STEPS
            during = ends[2:]
            print(f"rank {rank}: steps 3.. ended "
                  f"{[round(e - start, 2) for e in during]} s after the stop began")
            late = [round(e - start, 2) for e in during if not start < e < end]
            assert not late, (f"rank {rank}: steps ended {late} s after the stop "
                              f"began; summond ran again at {end - start:.2f} s")
            durations = [b - a for a, b in zip(ends[1:], during)]
            assert max(durations) <= REPORT_TIMEOUT + SLACK, (rank, durations)
            assert sum(d > 0.5 for d in durations) <= 1, (rank, durations)
        served, reference = results(tmp_path, "outage"), results(tmp_path, "outage-plain")
        for got, expected in zip(served["losses"], reference["losses"], strict=True):
            assert torch.equal(got, expected)
        with summon.Client(daemon.address) as client:
            # Once the phases are back, a session shows what FSDP has.
            assert assert_session_equals(client, "outage", served["params"]) == 24
            client.delete_model("outage", force=True)
