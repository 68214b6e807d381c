"""Fixtures of the FSDP conformance suite: a summond per world size and FSDP jobs.

`launch(daemon, world, cases)` runs one FSDP job of `world` worker processes
(worker.py, gloo on the CPU, one process group for all of `cases`) against
`daemon` and returns each case's results as rank 0 saved them. torch 2.x is
required (FSDP2's fully_shard, FSDP1 on the CPU); without it the suite is
skipped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.fsdp", reason="torch 2.x FSDP")
if not hasattr(__import__("torch.distributed.fsdp").distributed.fsdp, "fully_shard"):
    pytest.skip("torch 2.x with fully_shard needed", allow_module_level=True)

import summon  # noqa: E402
from summon.local import LocalDaemon, daemon_binary  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if not Path(daemon_binary()).is_file():
        raise pytest.UsageError(f"no summond at {daemon_binary()}: run `bazel build "
                                "//server:summond` or set SUMMON_DAEMON")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Job:
    """A running FSDP job: `world` worker processes (see worker.py)."""

    def __init__(self, daemon: LocalDaemon, world: int, cases: list[dict], out: Path,
                 script: Path = HERE / "worker.py"):
        self.out = out
        cases_file = out / f"cases-{free_port()}.json"
        cases_file.write_text(json.dumps(cases))
        port = free_port()
        self.logs = [out / f"rank{r}-{port}.log" for r in range(world)]
        self.processes = []
        for rank in range(world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                       SUMMON_SERVER=daemon.address, OMP_NUM_THREADS="1",
                       PYTHONPATH=str(REPO / "client" / "python"))
            with open(self.logs[rank], "wb") as log:
                self.processes.append(subprocess.Popen(
                    [sys.executable, str(script), str(cases_file), str(out)],
                    env=env, stdout=log, stderr=subprocess.STDOUT))

    def wait(self, timeout: float = 300) -> None:
        try:
            codes = [p.wait(timeout) for p in self.processes]
        finally:
            self.kill()
        if any(codes):
            text = "\n".join(f"--- rank {r} (exit {c})\n" + log.read_text()[-3000:]
                             for r, (c, log) in enumerate(zip(codes, self.logs)))
            raise AssertionError(f"the FSDP job failed:\n{text}")

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def results(out: Path, name: str) -> dict[str, Any]:
    return torch.load(out / f"{name}.pt")


@pytest.fixture(scope="module")
def daemons() -> Iterator[Callable[[int], LocalDaemon]]:
    """daemons(local_ranks) -> one summond per rank count, for the whole module."""
    started: dict[int, LocalDaemon] = {}
    directory = tempfile.TemporaryDirectory(prefix="summon-fsdp-")

    def get(local_ranks: int) -> LocalDaemon:
        if local_ranks not in started:
            data = Path(directory.name) / f"daemon{local_ranks}"
            data.mkdir()
            started[local_ranks] = LocalDaemon(local_ranks=local_ranks,
                                               data_dir=str(data)).start()
        return started[local_ranks]

    yield get
    for daemon in started.values():
        daemon.close()
    directory.cleanup()


def run_job(daemon: LocalDaemon, world: int, cases: list[dict], out: Path,
            timeout: float = 300, script: Path = HERE / "worker.py") -> None:
    """Runs `script` (default worker.py; tests/integrations has its own) as a
    job of `world` ranks with `cases` and waits for it."""
    Job(daemon, world, cases, out, script).wait(timeout)


def bits(array: Any) -> np.ndarray:
    """The bytes of a float tensor/array, for bit-for-bit comparison."""
    if isinstance(array, torch.Tensor):
        array = array.detach().contiguous().numpy()
    return np.ascontiguousarray(array).view(np.uint8)


def assert_session_equals(client: summon.Client, name: str, expected: dict,
                          grads: bool = False, **options: Any) -> int:
    """Every tensor of `expected` read through a read-only session of model `name`
    equals it bit for bit; returns how many were compared."""
    # A tied name (head.weight) is an alias, stored once under its primary.
    primary = {alias: p.fqn for p in client.describe_model(name).params.values()
               for alias in p.aliases}
    with client.summon_full_params(name, writeback=False, with_grads=grads,
                                   **options) as session:
        for fqn, tensor in expected.items():
            stored = primary.get(fqn, fqn)
            got = session.grad(stored) if grads else session.read(stored)
            assert got.shape == tuple(tensor.shape), fqn
            assert np.array_equal(bits(got), bits(tensor)), (
                f"{name}: {'grad of ' if grads else ''}{fqn} differs from FSDP's own "
                f"(max abs diff {np.abs(got - tensor.numpy()).max()})")
    return len(expected)


def model_names(client: summon.Client) -> set[str]:
    return {m.name for m in client.list_models()}


def delete_model(client: summon.Client, name: Optional[str]) -> None:
    if name in model_names(client):
        client.delete_model(name, force=True)


class Matrix:
    """Cases run as one job per world size (one process group each), then
    checked one by one from this process (test_fsdp1.py, test_fsdp2.py)."""

    def __init__(self, daemons: Callable[[int], LocalDaemon], out: Path, api: str,
                 by_world: dict[int, list[dict]]):
        self.out = out
        self.clients: dict[str, summon.Client] = {}
        for world, cases in by_world.items():
            daemon = daemons(world)
            run_job(daemon, world, [dict(c, api=api) for c in cases], out)
            self.clients.update({c["name"]: summon.Client(daemon.address) for c in cases})

    def result(self, name: str) -> dict[str, Any]:
        return results(self.out, name)

    def check_session(self, case: dict) -> None:
        """A session shows what FSDP itself showed after training, bit for bit."""
        result, name = self.result(case["name"]), case["name"]
        client = self.clients[name]
        assert result["steps"] == case.get("steps", 3)
        assert client.describe_model(name).state == "READY"
        # Every name named_parameters() gives, the tied head included.
        assert "head.weight" in result["params"] and "embed.weight" in result["params"]
        assert assert_session_equals(client, name, result["params"]) == PARAMETERS
        # Training happened on summond's shards: the values moved from init.
        from model import TinyLM
        torch.manual_seed(case.get("seed", 0))
        initial = TinyLM().blocks[1].qkv.weight.detach()
        assert not torch.equal(result["params"]["blocks.1.qkv.weight"], initial)

    def check_eval(self, name: str) -> None:
        """After each step's evaluation forward (under no_grad) the trainer and
        summond both have rank 0 IDLE again, and serve counted only the
        optimizer steps before it."""
        result = self.result(name)
        assert result["eval_phases"] == [("IDLE", "IDLE", 1), ("IDLE", "IDLE", 2),
                                         ("IDLE", "IDLE", 3)]
        assert result["steps"] == 3

    def check_grads(self, name: str) -> None:
        assert assert_session_equals(self.clients[name], name, self.result(name)["grads"],
                                     grads=True) == PARAMETERS

    def check_same(self, name: str, other: str) -> None:
        """Two runs trained identically: every loss and parameter equal."""
        a, b = self.result(name), self.result(other)
        for got, expected in zip(a["losses"], b["losses"], strict=True):
            assert torch.equal(got, expected)
        for fqn, expected in b["params"].items():
            assert torch.equal(a["params"][fqn], expected), fqn

    def check_edit(self, edited: str, reference: str, unedited: str) -> None:
        """An edit through a summon session with writeback changed training
        exactly as the same edit through FSDP's own API did."""
        self.check_same(edited, reference)
        served = self.result(edited)
        # The edit moved training: the step after it differs from an unedited run.
        step = 2
        assert not torch.equal(served["losses"][step], self.result(unedited)["losses"][step])
        # on_external_write named the edited unit once, as the next step began.
        assert served["edits"] == [["blocks.0"]]

    def close(self) -> None:
        for name, client in self.clients.items():
            if name in model_names(client):
                client.delete_model(name, force=True)
            client.close()


PARAMETERS = 24  # TinyLM's named_parameters(remove_duplicate=False)
