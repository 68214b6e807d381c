"""FSDP2 (fully_shard) served through summon: torch's own full_tensor() is the judge.

One job per world size runs every case in one process group; each test then
opens a session from this process and compares it bit for bit with each
parameter's full_tensor() on rank 0 after training.
"""

from __future__ import annotations

import pytest

from conftest import Matrix

W2 = [
    {"name": "f2-full"},
    {"name": "f2-no-reshard", "reshard": False},
    {"name": "f2-dim1", "dim1": True},
    {"name": "f2-mp", "mp": True},
    {"name": "f2-grads", "grads": True},
    {"name": "f2-edit", "edit": "summon", "steps": 4, "edit_after": 2},
    {"name": "f2-edit-ref", "edit": "torch", "steps": 4, "edit_after": 2, "serve": False},
]
W4 = [
    {"name": "f2-w4-full"},
    {"name": "f2-w4-hsdp", "hybrid": 2, "grads": True},
    {"name": "f2-w4-dim1-no-reshard", "dim1": True, "reshard": False},
]
SERVED = [c for c in W2 + W4 if c.get("serve", True)]


@pytest.fixture(scope="module")
def jobs(daemons, tmp_path_factory):
    matrix = Matrix(daemons, tmp_path_factory.mktemp("fsdp2"), "fsdp2", {2: W2, 4: W4})
    yield matrix
    matrix.close()


@pytest.mark.parametrize("case", SERVED, ids=[c["name"] for c in SERVED])
def test_session_equals_full_tensor(jobs: Matrix, case: dict) -> None:
    jobs.check_session(case)


@pytest.mark.parametrize("name", ["f2-grads", "f2-w4-hsdp"])
def test_grads_session_equals_full_grad(jobs: Matrix, name: str) -> None:
    jobs.check_grads(name)


@pytest.mark.parametrize("name,strategy", [
    ("f2-full", "FULL_SHARD"), ("f2-no-reshard", "SHARD_GRAD_OP"),
    ("f2-w4-hsdp", "HYBRID_SHARD")])
def test_layout_names_the_strategy(jobs: Matrix, name: str, strategy: str) -> None:
    assert jobs.clients[name].describe_model(name).strategy == strategy


def test_outside_edit_equals_dtensor_write(jobs: Matrix) -> None:
    jobs.check_edit("f2-edit", "f2-edit-ref", "f2-full")
