#!/usr/bin/env python3
"""A/B of summond binaries on bench/weight_sync.py's 1 B setup, back to back.

    scripts/python bench/weight_sync_ab.py OLD/summond NEW/summond NEW/summond:--flag=value

Each argument (a binary, optionally ":"-separated extra flags) in turn, for
$ROUNDS rounds (default 2): a fresh 2 nodes x 2 ranks cluster with the
seeded 1.0 B-param bf16 Llama shape, one Publish, then TP rank 0 of TP=$TP
(default 1) reads its slices on node 1 into one reused SliceBuffer: a
warm-up read, then the median of $N (default 4) reads' wall time and of
the CPU seconds both daemons spent per read (/proc/PID/stat). Alternating
the binaries puts them under the same load, which bench/weight_sync.py's
separate runs, minutes apart, cannot on a shared machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "client/python"))

import summon  # noqa: E402
import weight_sync as ws  # noqa: E402
from summon.local import LocalDaemon  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_ports(count: int) -> list[int]:
    ports = []
    for _ in range(count):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return ports


def measure(spec: str, tp: int, reads: int) -> tuple[float, float]:
    """Median wall and daemons' CPU seconds of one TP rank's read."""
    binary, *flags = spec.split(":")
    shape = ws.PRESETS["1b"]
    layout = ws.llama_layout(shape["hidden"], shape["inter"], shape["layers"], shape["vocab"],
                             shape["kv_heads"], shape["heads"])
    run = Path(tempfile.mkdtemp(prefix="weight-sync-ab-"))
    nodes = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    daemons = []
    try:
        for node in range(2):
            (run / f"d{node}").mkdir()
            daemons.append(LocalDaemon(local_ranks=2, data_dir=str(run / f"d{node}"),
                                       binary=binary, extra_args=[
                "--nodes", nodes, "--coordinator", "static", "--node-rank", str(node),
                *flags]).start())
        leader = summon.Client(daemons[0].address, timeout=300)
        reader = summon.Client(daemons[1].address, timeout=300)
        ws.create_when_joined(leader, layout)
        leader.publish("llama", 1)
        pids = [d.process.pid for d in daemons]
        requests = ws.tp_requests(layout, tp, 0)
        walls, cpus = [], []
        with summon.SliceBuffer(ws.packed_bytes(requests)) as buffer:
            for i in range(reads + 1):
                cpu = sum(cpu_seconds(p) for p in pids)
                start = time.perf_counter()
                reader.read_slices("llama", 1, requests, into=buffer)
                if i:  # The first is the warm-up.
                    walls.append(time.perf_counter() - start)
                    cpus.append(sum(cpu_seconds(p) for p in pids) - cpu)
        leader.delete_model("llama")
        return statistics.median(walls), statistics.median(cpus)
    finally:
        for daemon in daemons:
            daemon.close()
        shutil.rmtree(run, ignore_errors=True)


def main() -> None:
    tp = int(os.environ.get("TP", "1"))
    reads = int(os.environ.get("N", "4"))
    for round_ in range(int(os.environ.get("ROUNDS", "2"))):
        for spec in sys.argv[1:]:
            wall, cpu = measure(spec, tp, reads)
            print(f"TP {tp} {os.path.basename(spec):50s} round {round_}: median wall "
                  f"{wall * 1e3:8.1f} ms  daemons' CPU {cpu * 1e3:8.1f} ms  "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
