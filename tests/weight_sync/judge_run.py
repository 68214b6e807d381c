"""Starts the judge's rank processes (vllm_judge.py) and gathers their
reports: one process per rank of the largest TP size."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

HERE = Path(__file__).resolve().parent


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_ranks(out: Path, tp_sizes: Sequence[int], case_names: Sequence[str] = (),
              extra_env: Mapping[str, str] | None = None,
              timeout_s: float = 1500) -> dict:
    """{(tp, case): [rank results]}; AssertionError with a log tail if a
    rank process failed."""
    ports = ",".join(map(str, free_ports(len(tp_sizes))))
    sizes = ",".join(map(str, tp_sizes))
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", **(extra_env or {}))
    started = time.monotonic()
    procs = []
    for rank in range(max(tp_sizes)):
        log = open(out / f"log{rank}", "w")
        procs.append((subprocess.Popen([sys.executable, str(HERE / "vllm_judge.py"), str(rank),
                                        sizes, ports, str(out), *case_names],
                                       stdout=log, stderr=subprocess.STDOUT, env=env), log))
    try:
        for proc, _ in procs:
            proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    by_case: dict = {}
    for rank, (proc, _) in enumerate(procs):
        report = out / f"rank{rank}.json"
        if proc.returncode != 0 or not report.exists():
            tail = (out / f"log{rank}").read_text()[-3000:]
            raise AssertionError(f"judge rank {rank} exited {proc.returncode}:\n{tail}")
        data = json.loads(report.read_text())
        print(f"rank {rank}: import vllm {data['import_s']} s, all {data['total_s']} s")
        for result in data["results"]:
            result["rank"] = rank
            by_case.setdefault((result["tp"], result["case"]), []).append(result)
    return by_case


def assert_ranks_hold_the_plan(results: list, tp: int) -> None:
    """Every rank reported, with no problem, and load_into set every parameter."""
    assert sorted(r["rank"] for r in results) == list(range(tp)), "a rank did not report"
    for r in results:
        assert r["problems"] == [], f"rank {r['rank']}: " + "; ".join(r["problems"])
        assert r["loaded"] == r["params"] == r["changed_by_load_into"] > 0
        print(f"tp {tp} {r['case']} rank {r['rank']}: build {r['build_s']} s, "
              f"check {r['check_s']} s, {r['read_calls']} read calls")
