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
    {"name": "f2-plain", "serve": False},
    {"name": "f2-groups-frozen", "groups": True, "frozen": True},
    {"name": "f2-accumulate-eval", "accumulate": True, "eval": True},
    {"name": "f2-nested", "nested": True},
    {"name": "f2-violate", "violate": True},
    {"name": "f2-block-wait", "block": "wait"},
    {"name": "f2-block-raise", "block": "raise"},
    {"name": "f2-mismatch", "nested": True, "serve_as": "f2-full"},
]
W4 = [
    {"name": "f2-w4-full"},
    {"name": "f2-w4-hsdp", "hybrid": 2, "grads": True},
    {"name": "f2-w4-dim1-no-reshard", "dim1": True, "reshard": False},
]
SERVED = [c for c in W2 + W4 if c.get("serve", True) and not c.get("violate")
          and not c.get("serve_as")]


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


def test_serving_changes_no_step(jobs: Matrix) -> None:
    """The same job with and without serve: identical losses and parameters."""
    jobs.check_same("f2-full", "f2-plain")


def test_replaced_storage_is_refused(jobs: Matrix) -> None:
    message = jobs.result("f2-violate")["violation"]
    assert "its FSDP tensors were replaced after serve()" in message, message


def test_eval_forwards_between_steps(jobs: Matrix) -> None:
    """A forward under no_grad moves FORWARD -> IDLE; no step is counted."""
    jobs.check_eval("f2-accumulate-eval")


def test_existing_model_of_another_layout_is_refused(jobs: Matrix) -> None:
    message = jobs.result("f2-mismatch")["error"]
    assert "model 'f2-full' exists in summond and does not fit this job" in message, message
    assert "units differ" in message, message


def test_a_writable_session_holds_the_next_step(jobs: Matrix) -> None:
    """R3 through serve's hooks: the forward waits for the session's close
    (wait=60), or raises FAILED_PRECONDITION at once (wait=None) and the job
    trains on; both end equal to FSDP's own state (test_session_equals_*)."""
    assert jobs.result("f2-block-wait")["blocked"] >= 0.9
    assert jobs.result("f2-block-raise")["blocked"] == "FAILED_PRECONDITION"
