"""The torn-read check: a real FSDP2 job (2 gloo ranks) publishes after
every optimizer step (serve(..., publish_every=1)) while a reader pulls the
newest version's full parameters as fast as it can; every pull must equal,
bit for bit, what the trainer held after that very step (SHA-256 of
DTensor.full_tensor()), however the pulls overlap the next steps."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import summon
from summon import SliceRequest

REPO = Path(__file__).resolve().parents[2]
STEPS = 40


def test_pulls_overlapping_steps_are_never_torn(start_daemon, tmp_path: Path) -> None:
    daemon = start_daemon(local_ranks=2, extra_args=["--max-versions", "3"])
    out = tmp_path / "sums.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "client/python"))
    ranks = [subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "weight_sync_job.py"), "--rank", str(r),
         "--world", "2", "--steps", str(STEPS), "--run-dir", str(tmp_path),
         "--server", daemon.address, "--name", "mlp", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(2)]
    pulls: list[tuple[int, dict[str, str]]] = []
    released = [0]
    done = threading.Event()

    def reader() -> None:
        with summon.Client(daemon.address, timeout=60) as client:
            version = client.wait_version("mlp", 1, timeout=120)
            params = [(p.fqn, list(p.shape)) for u in client.describe_model("mlp").units
                      for p in u.params]
            entries = [SliceRequest(fqn, [(0, n) for n in shape]) for fqn, shape in params]
            while True:
                try:
                    version = client.wait_version("mlp", 1, timeout=60)
                    arrays = client.read_slices("mlp", version, entries)
                except summon.SummonError as error:
                    if error.code == "FAILED_PRECONDITION" and "released" in error.message:
                        released[0] += 1
                        continue
                    raise
                pulls.append((version, {fqn: hashlib.sha256(a.tobytes()).hexdigest()
                                        for (fqn, _), a in zip(params, arrays)}))
                if done.is_set():
                    return

    thread = threading.Thread(target=reader)
    thread.start()
    logs = [rank.communicate(timeout=300)[0] for rank in ranks]
    done.set()
    thread.join(timeout=120)
    assert all(rank.returncode == 0 for rank in ranks), "\n".join(logs)[-4000:]
    result = json.loads(out.read_text())
    assert result["published"] == STEPS
    sums = {int(step): s for step, s in result["sums"].items()}
    versions = {version for version, _ in pulls}
    print(f"{len(pulls)} pulls of {len(versions)} versions, {released[0]} found released")
    assert len(pulls) >= STEPS and len(versions) >= STEPS // 4, (len(pulls), versions)
    for version, got in pulls:
        assert got == sums[version], f"version {version} torn or stale"
