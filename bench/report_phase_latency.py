"""What one trainer phase report costs, alone and beside busy CPUs (issue 35).

    scripts/python bench/report_phase_latency.py [--steps 200] [--burners 2]
        [--before-daemon SUMMOND]

Starts a summond (LocalDaemon, its data dir under the system's temporary
directory, on disk like a real one) with one rank, attaches a trainer and
walks FORWARD, BETWEEN, BACKWARD, OPTIMIZER, IDLE `--steps` times through
Client.report_phase (with a deadline, as serve reports), then times as many
heartbeats (the same gRPC path without the phase machine and the leases
file), then walks the step as summon.torch does since issue 35c: BETWEEN and
BACKWARD in one call (`through`), 4 calls a step; `step of 5` / `step of 4`
are whole steps' calls. `--burners N` keeps N processes multiplying matrices meanwhile, as
the ranks of a training job do. `--before-daemon` runs the same walk against
a second summond binary (e.g. built at an earlier commit), right after.
Prints each phase's median and 90th percentile.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))

PHASES = ("FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER", "IDLE")
LAYOUT = {"strategy": "FULL_SHARD", "use_orig_params": True, "units": [
    {"fqn": "", "params": [{"fqn": "w", "shape": [64], "dtype": "float32"}]}]}


def burn() -> None:
    import torch
    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    while True:
        a @ a


def walk(steps: int, binary: Optional[str]) -> dict[str, list[float]]:
    from summon.client import Client
    from summon.local import LocalDaemon
    with tempfile.TemporaryDirectory(prefix="summon-bench-") as tmp, \
            LocalDaemon(local_ranks=1, data_dir=tmp, binary=binary) as daemon:
        client = Client(daemon.address)
        client.create_model("m", LAYOUT)
        lease = client.attach("m", [0], "bench", 10).lease_id
        times: dict[str, list[float]] = {p: [] for p in PHASES + (
            "heartbeat", "BETWEEN+BACKWARD", "step of 5", "step of 4")}
        for step in range(steps):
            step_start = time.perf_counter()
            for phase in PHASES:
                start = time.perf_counter()
                client.report_phase("m", 0, phase, step if phase == "FORWARD" else None,
                                    60000, lease, timeout=2.0)
                times[phase].append(time.perf_counter() - start)
            times["step of 5"].append(time.perf_counter() - step_start)
        for step in range(steps if binary is None else 0):  # an older summond: no `through`
            step_start = time.perf_counter()
            for through, phase in ((None, "FORWARD"), ("BETWEEN", "BACKWARD"),
                                   (None, "OPTIMIZER"), (None, "IDLE")):
                start = time.perf_counter()
                client.report_phase("m", 0, phase, step if phase == "FORWARD" else None,
                                    60000, lease, timeout=2.0,
                                    **({"through": through} if through else {}))
                if through:
                    times["BETWEEN+BACKWARD"].append(time.perf_counter() - start)
            times["step of 4"].append(time.perf_counter() - step_start)
        for _ in range(steps):
            start = time.perf_counter()
            client.renew(lease, 2.0)
            times["heartbeat"].append(time.perf_counter() - start)
        client.detach(lease)
        client.delete_model("m")
        client.close()
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--burners", type=int, default=0)
    parser.add_argument("--before-daemon", metavar="SUMMOND")
    args = parser.parse_args()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for process in burners:
        process.start()
    try:
        runs = [("summond", None)] + ([("before", args.before_daemon)]
                                      if args.before_daemon else [])
        for label, binary in runs:
            times = walk(args.steps, binary)
            print(f"{label} ({args.burners} burners): " + ", ".join(
                f"{name} {statistics.median(t) * 1e3:.3f} / "
                f"{sorted(t)[int(len(t) * 0.9)] * 1e3:.3f} ms" for name, t in times.items() if t)
                + " (median / p90)")
    finally:
        for process in burners:
            process.terminate()
            process.join()


if __name__ == "__main__":
    main()
