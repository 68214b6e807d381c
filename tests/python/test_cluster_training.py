"""PyTorch training on a 2-node cluster (issue 20): examples/torch_train.py
with one summond per node (node 0 leads) and one torch rank per node, each
trainer attached through its own node. The losses equal the single-process
reference with an inspector's edit between steps; summon never stops a
step: with the leader stopped (SIGSTOP) for 5 s mid-run the losses are those
of the undisturbed run, and the phases come back once it runs again; a
follower and then the leader restarting between steps lose nothing, and
writebacks work afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from summon.phases import phase_path

REPO = Path(__file__).resolve().parents[2]
RTOL = 1e-5
STEPS = "6"


def train(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "result.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "examples/torch_train.py"), "--json", str(out),
         "--timeout", "150", "--world-size", "2", "--nodes", "2", *args],
        capture_output=True, text=True, timeout=200)
    print(result.stdout)  # the per-step table, shown when a test fails
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run] = json.loads(out.read_text())["runs"]
    return run


def assert_matches_reference(run: dict) -> None:
    for step, (got, want) in enumerate(zip(run["losses"], run["reference_losses"]), 1):
        assert abs(got - want) <= RTOL * abs(want), f"step {step}: {got} vs {want}"
    assert len(run["param_rel"]) == 26
    assert max(run["param_rel"].values()) <= RTOL
    assert run["reestablished"] == [True, True]


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run = train(tmp_path_factory.mktemp("plain"), "--steps", STEPS)
    assert_matches_reference(run)
    assert run["outages"] == [0, 0]
    return run


def test_two_nodes_with_an_edit_between_steps_match_one_process(tmp_path: Path,
                                                                undisturbed: dict) -> None:
    run = train(tmp_path, "--steps", STEPS, "--edit-at", "3")
    assert_matches_reference(run)
    # The edit mattered, and both ranks, each on its own node, heard of it.
    assert run["losses"][:3] == undisturbed["losses"][:3]
    assert abs(run["losses"][3] - undisturbed["losses"][3]) > 1e-3
    assert run["external_edits"] == [[{"step": 4, "units": ["blocks.0"]}]] * 2


def test_a_stopped_leader_never_stops_a_step(tmp_path: Path, undisturbed: dict) -> None:
    run = train(tmp_path, "--steps", STEPS, "--stop-leader-at", "2", "--stop-seconds", "5")
    # Every rank trained on while the leader was stopped...
    assert all(outages >= 1 for outages in run["outages"]), run["outages"]
    # ...and computed exactly what the undisturbed run computed.
    assert run["losses"] == undisturbed["losses"]
    # Phases re-established; the final parameters were read through a session.
    assert_matches_reference(run)


def test_a_follower_then_the_leader_restart_between_steps(tmp_path: Path,
                                                          undisturbed: dict) -> None:
    # Restarts after step 2, an inspector's writeback after step 3.
    run = train(tmp_path, "--steps", STEPS, "--restart-nodes-at", "2", "--edit-at", "3")
    assert run["views_valid_after_restart"] == [True, True]
    assert run["losses"][:3] == undisturbed["losses"][:3]
    assert_matches_reference(run)
    assert run["external_edits"] == [[{"step": 4, "units": ["blocks.0"]}]] * 2


@pytest.mark.parametrize("start,target,path", [
    ("IDLE", "IDLE", ["IDLE"]),
    ("FORWARD", "FORWARD", ["FORWARD"]),
    ("IDLE", "OPTIMIZER", ["FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER"]),
    ("FORWARD", "BACKWARD", ["BETWEEN", "BACKWARD"]),
    ("OPTIMIZER", "FORWARD", ["IDLE", "FORWARD"]),
    ("BETWEEN", "IDLE", ["BACKWARD", "IDLE"]),
    ("BACKWARD", "BETWEEN", ["IDLE", "FORWARD", "BETWEEN"]),
])
def test_phase_path_walks_legal_moves(start: str, target: str, path: list[str]) -> None:
    assert phase_path(start, target) == path
