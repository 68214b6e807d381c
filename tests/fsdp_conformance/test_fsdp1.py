"""FSDP1 (FullyShardedDataParallel) served through summon: torch's own unshard is the judge.

One job per world size runs every case in one process group (conftest.launch);
each test then opens a session from this process and compares it bit for
bit with what FSDP1's summon_full_params showed on rank 0 after training.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import summon
from conftest import assert_session_equals, results, run_job

W2 = [
    {"name": "f1-full", "strategy": "FULL_SHARD", "uop": True},
    {"name": "f1-full-flat", "strategy": "FULL_SHARD", "uop": False},
    {"name": "f1-grad-op", "strategy": "SHARD_GRAD_OP", "uop": True},
    {"name": "f1-grad-op-flat", "strategy": "SHARD_GRAD_OP", "uop": False},
    {"name": "f1-no-shard-flat", "strategy": "NO_SHARD", "uop": False},
    {"name": "f1-mp", "strategy": "FULL_SHARD", "uop": True, "mp": True},
    {"name": "f1-mp-flat", "strategy": "FULL_SHARD", "uop": False, "mp": True},
    {"name": "f1-grads", "strategy": "FULL_SHARD", "uop": True, "grads": True},
    {"name": "f1-edit", "strategy": "FULL_SHARD", "uop": True, "edit": "summon",
     "steps": 4, "edit_after": 2},
    {"name": "f1-edit-ref", "strategy": "FULL_SHARD", "uop": True, "edit": "torch",
     "steps": 4, "edit_after": 2, "serve": False},
]
W4 = [
    {"name": "f1-w4-full", "strategy": "FULL_SHARD", "uop": True},
    {"name": "f1-w4-full-flat", "strategy": "FULL_SHARD", "uop": False},
    {"name": "f1-w4-grad-op", "strategy": "SHARD_GRAD_OP", "uop": True, "grads": True},
]
SERVED = [c for c in W2 + W4 if c.get("serve", True)]


@pytest.fixture(scope="module")
def jobs(daemons, tmp_path_factory) -> dict:
    """Runs the W=2 and W=4 jobs once; returns (client per world, out dir)."""
    out = tmp_path_factory.mktemp("fsdp1")
    clients = {}
    for world, cases in ((2, W2), (4, W4)):
        daemon = daemons(world)
        run_job(daemon, world, [dict(c, api="fsdp1") for c in cases], out)
        clients.update({c["name"]: summon.Client(daemon.address) for c in cases})
    yield {"out": out, "clients": clients}
    for name, client in clients.items():
        if name in {m.name for m in client.list_models()}:
            client.delete_model(name, force=True)
        client.close()


@pytest.mark.parametrize("case", SERVED, ids=[c["name"] for c in SERVED])
def test_session_equals_summon_full_params(jobs: dict, case: dict) -> None:
    result = results(jobs["out"], case["name"])
    client = jobs["clients"][case["name"]]
    steps = case.get("steps", 3)
    assert result["steps"] == steps
    assert client.describe_model(case["name"]).state == "READY"
    # Every name named_parameters() gives, the tied head included.
    assert "head.weight" in result["params"] and "embed.weight" in result["params"]
    assert assert_session_equals(client, case["name"], result["params"]) == 24
    # Training really happened on summond's shards: the values moved.
    torch.manual_seed(0)
    assert not torch.equal(result["params"]["blocks.1.qkv.weight"],
                           __import__("model").TinyLM().blocks[1].qkv.weight)


@pytest.mark.parametrize("case", SERVED[:2], ids=[c["name"] for c in SERVED[:2]])
def test_rank0_only_offload_session_equals_fsdp(jobs: dict, case: dict) -> None:
    result = results(jobs["out"], case["name"])
    assert_session_equals(jobs["clients"][case["name"]], case["name"],
                          result["rank0_offload"], rank0_only=True, offload_to_cpu=True)


@pytest.mark.parametrize("name", ["f1-grads", "f1-w4-grad-op"])
def test_grads_session_equals_with_grads(jobs: dict, name: str) -> None:
    result = results(jobs["out"], name)
    assert assert_session_equals(jobs["clients"][name], name, result["grads"],
                                 grads=True) == 24


def test_outside_edit_equals_fsdp_writeback(jobs: dict) -> None:
    served, reference = results(jobs["out"], "f1-edit"), results(jobs["out"], "f1-edit-ref")
    for got, want in zip(served["losses"], reference["losses"], strict=True):
        assert torch.equal(got, want)
    for fqn, want in reference["params"].items():
        assert torch.equal(served["params"][fqn], want), fqn
    # The edit moved training: a step after it differs from an unedited run.
    assert not torch.equal(served["losses"][2], results(jobs["out"], "f1-full")["losses"][2])
    # on_external_write named the edited unit once, at the next step's start.
    assert served["edits"] == [["blocks.0"]]
