"""A served FSDP job SIGKILLed mid-step: its shards stay in summond, readable;
the lease lapses; a restarted job serving the same name resumes from them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import summon
from conftest import Job, assert_session_equals, results, run_job

LEASE = 2  # seconds: the killed job's lease lapses quickly


def wait_for(paths: list[Path], job: Job, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if any(p.poll() is not None for p in job.processes):
            job.wait(0)  # raises with the logs
        assert time.monotonic() < deadline, f"the job never reached {paths}"
        time.sleep(0.1)


@pytest.mark.parametrize("api", ["fsdp1", "fsdp2"])
def test_sigkill_mid_step_then_resume(daemons, tmp_path: Path, api: str) -> None:
    daemon = daemons(2)
    name = f"crash-{api}"
    case = {"api": api, "name": name, "strategy": "FULL_SHARD", "steps": 5,
            "hang_after": 2, "lease": LEASE}
    job = Job(daemon, 2, [case], tmp_path)
    try:
        wait_for([tmp_path / f"{name}.hung{r}" for r in range(2)], job)
        job.kill()  # SIGKILL, between forward and backward of step 3
    finally:
        job.kill()
    before = results(tmp_path, name)["params"]  # FSDP's own, after 2 steps
    with summon.Client(daemon.address) as client:
        ranks = client.describe_model(name).ranks
        assert [r.phase for r in ranks] == ["BETWEEN", "BETWEEN"]
        # Readable while the dead trainer still holds the ranks (BETWEEN).
        assert assert_session_equals(client, name, before) == 24
        deadline = time.monotonic() + LEASE + 5
        while any(r.phase != "IDLE" for r in client.describe_model(name).ranks):
            assert time.monotonic() < deadline, "the killed job's lease never lapsed"
            time.sleep(0.1)
        assert all("lapsed" in r.last_event for r in client.describe_model(name).ranks)
        assert assert_session_equals(client, name, before) == 24

        # A new job serving the same name adopts the shards and trains on.
        run_job(daemon, 2, [dict(case, hang_after=None, resume=True, steps=2)], tmp_path)
        resumed = results(tmp_path, name)
        for fqn, tensor in before.items():
            assert torch.equal(resumed["resumed"][fqn], tensor), fqn
        assert resumed["steps"] == 2
        assert assert_session_equals(client, name, resumed["params"]) == 24
        client.delete_model(name, force=True)
