"""FSDP1 (FullyShardedDataParallel) served through summon: torch's own unshard is the judge.

One job per world size runs every case in one process group; each test then
opens a session from this process and compares it bit for bit with what
FSDP1's summon_full_params showed on rank 0 after training.
"""

from __future__ import annotations

import pytest

from conftest import Matrix, assert_session_equals

W2 = [
    {"name": "f1-full", "strategy": "FULL_SHARD", "uop": True},
    {"name": "f1-full-flat", "strategy": "FULL_SHARD", "uop": False},
    {"name": "f1-grad-op", "strategy": "SHARD_GRAD_OP", "uop": True},
    {"name": "f1-grad-op-flat", "strategy": "SHARD_GRAD_OP", "uop": False},
    {"name": "f1-no-shard-flat", "strategy": "NO_SHARD", "uop": False},
    {"name": "f1-no-shard", "strategy": "NO_SHARD", "uop": True},
    {"name": "f1-mp", "strategy": "FULL_SHARD", "uop": True, "mp": True},
    {"name": "f1-mp-flat", "strategy": "FULL_SHARD", "uop": False, "mp": True},
    {"name": "f1-grads", "strategy": "FULL_SHARD", "uop": True, "grads": True},
    {"name": "f1-edit", "strategy": "FULL_SHARD", "uop": True, "edit": "summon",
     "steps": 4, "edit_after": 2},
    {"name": "f1-edit-ref", "strategy": "FULL_SHARD", "uop": True, "edit": "torch",
     "steps": 4, "edit_after": 2, "serve": False},
    {"name": "f1-plain", "strategy": "FULL_SHARD", "uop": True, "serve": False},
    {"name": "f1-groups-frozen", "strategy": "FULL_SHARD", "uop": True, "groups": True,
     "frozen": True},
    {"name": "f1-accumulate-eval", "strategy": "FULL_SHARD", "uop": True, "accumulate": True,
     "eval": True},
    {"name": "f1-nested", "strategy": "FULL_SHARD", "uop": True, "nested": True},
    {"name": "f1-violate", "strategy": "FULL_SHARD", "uop": True, "violate": True},
    {"name": "f1-mismatch", "strategy": "FULL_SHARD", "uop": True, "nested": True, "serve_as": "f1-full"},
    {"name": "f1-grad-op-mp", "strategy": "SHARD_GRAD_OP", "uop": True, "mp": True},
]
W4 = [
    {"name": "f1-w4-full", "strategy": "FULL_SHARD", "uop": True},
    {"name": "f1-w4-full-flat", "strategy": "FULL_SHARD", "uop": False},
    {"name": "f1-w4-grad-op", "strategy": "SHARD_GRAD_OP", "uop": True, "grads": True},
    {"name": "f1-w4-hybrid", "strategy": "HYBRID_SHARD", "uop": True, "hybrid": 2},
    {"name": "f1-w4-hybrid-zero2", "strategy": "_HYBRID_SHARD_ZERO2", "uop": False,
     "hybrid": 2},
]
SERVED = [c for c in W2 + W4 if c.get("serve", True) and not c.get("violate")
          and not c.get("serve_as")]


@pytest.fixture(scope="module")
def jobs(daemons, tmp_path_factory):
    matrix = Matrix(daemons, tmp_path_factory.mktemp("fsdp1"), "fsdp1", {2: W2, 4: W4})
    yield matrix
    matrix.close()


@pytest.mark.parametrize("case", SERVED, ids=[c["name"] for c in SERVED])
def test_session_equals_summon_full_params(jobs: Matrix, case: dict) -> None:
    jobs.check_session(case)


@pytest.mark.parametrize("name", ["f1-full", "f1-full-flat", "f1-w4-full"])
def test_rank0_only_offload_session_equals_fsdp(jobs: Matrix, name: str) -> None:
    """Both sessions and FSDP's summon_full_params(rank0_only, offload_to_cpu)."""
    assert_session_equals(jobs.clients[name], name, jobs.result(name)["rank0_offload"],
                          rank0_only=True, offload_to_cpu=True)


@pytest.mark.parametrize("name", ["f1-grads", "f1-w4-grad-op"])
def test_grads_session_equals_with_grads(jobs: Matrix, name: str) -> None:
    jobs.check_grads(name)


def test_outside_edit_equals_fsdp_writeback(jobs: Matrix) -> None:
    jobs.check_edit("f1-edit", "f1-edit-ref", "f1-full")


def test_serving_changes_no_step(jobs: Matrix) -> None:
    """The same job with and without serve: identical losses and parameters."""
    jobs.check_same("f1-full", "f1-plain")


def test_replaced_storage_is_refused(jobs: Matrix) -> None:
    message = jobs.result("f1-violate")["violation"]
    assert "its FSDP tensors were replaced after serve()" in message, message


def test_eval_forwards_between_steps(jobs: Matrix) -> None:
    """A forward under no_grad moves FORWARD -> IDLE; no step is counted."""
    jobs.check_eval("f1-accumulate-eval")


def test_existing_model_of_another_layout_is_refused(jobs: Matrix) -> None:
    message = jobs.result("f1-mismatch")["error"]
    assert "model 'f1-full' exists in summond and does not fit this job" in message, message
    assert "units differ" in message, message
