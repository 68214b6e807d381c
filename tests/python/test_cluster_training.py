"""PyTorch training on a 2-node cluster (issue 20): examples/torch_train.py
with one summond per node (node 0 leads) and one torch rank per node, each
trainer attached through its own node. The losses equal the single-process
reference with an inspector's edit between steps; summon never stops a
step: with the leader, or a follower, stopped (SIGSTOP) for 6 s mid-run, or
the network between a follower and the leader cut for as long, every rank's
later steps end during the outage, within the 2 s bound (R24), the losses
are those of the undisturbed run, and the phases come back once it ends; a
follower and then the leader restarting between steps lose nothing, and
writebacks work afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

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
    assert len(run["losses"]) == len(run["reference_losses"]) == int(STEPS)
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


# R24's bound: while a node of the cluster does not answer (stopped, or cut
# off from the leader), a rank's phase reports hold its steps at most the
# trainer's report_timeout (2 s by default), once per outage, in all.
REPORT_TIMEOUT = 2.0
# Scheduling allowance on top of the bound, not part of it: a step's own
# work (20-40 ms here), the calls a live node answers, the leader's wait for
# a silent follower to take a step's generations (step_generations_wait,
# 0.1 s, once), and a timer firing late on a loaded 2-core machine.
ALLOWANCE = 0.4
STOP_SECONDS = "6"  # three times the bound
# A node silent for 3 heartbeats (6 s) is declared failed: not before the
# steps during the outage are done, so a leader that waited for a silent
# follower until then (as before step_generations_wait) would show as a
# step of 4-6 s, instead of hiding behind the rank on the follower's own 2 s.
HEARTBEAT_MS = "2000"


def assert_steps_went_on(run: dict, stop_after: int) -> None:
    """On every rank, every step after the outage began ended during it: the
    first within the bound of its start, each later one at its own pace
    (what waited, waited once, not once per step or per move); and the
    rank's own phase reports held its steps the bound at most, in all. The
    bound is per rank: a rank also waits for the others in the job's own
    collectives, which is not a summon call."""
    began, ended = run["stop_window"]
    for rank, (ends, held) in enumerate(zip(run["step_ends"], run["report_seconds"],
                                            strict=True)):
        assert len(ends) == len(held) == int(STEPS), (rank, ends, held)
        during = [round(end - began, 2) for end in ends[stop_after:]]
        assert all(0 < end < ended - began for end in during), (
            f"rank {rank}: steps {stop_after + 1}.. ended at {during} s after the "
            f"outage began, which lasted {ended - began:.2f} s")
        assert during[0] <= REPORT_TIMEOUT + ALLOWANCE, (rank, during)
        paces = [round(b - a, 2) for a, b in zip(during, during[1:])]
        assert max(paces) <= ALLOWANCE, (rank, during, paces)
        assert sum(held[stop_after:]) <= REPORT_TIMEOUT + ALLOWANCE, (rank, held)


@pytest.mark.parametrize("node,cut,wait", [
    (0, False, None),
    (1, False, "60"),
    (1, True, "60"),
], ids=["leader-stopped-attach-defaults", "follower-stopped-wait-60",
        "follower-cut-off-wait-60"])
def test_a_stopped_node_never_stops_a_step(tmp_path: Path, undisturbed: dict, node: int,
                                           cut: bool, wait: Optional[str]) -> None:
    """The leader, then a follower, SIGSTOPped 6 s after step 2, and the
    network between the follower and the leader cut (TCP proxies hold every
    byte) for as long: steps 3..6 finish while it lasts, within the bound on
    every rank, with attach's defaults and with serve's default R3 wait
    (60 s, which must not add to the bound)."""
    run = train(tmp_path, "--steps", STEPS, "--stop-leader-at", "2", "--stop-seconds",
                STOP_SECONDS, "--stop-node", str(node), "--heartbeat-ms", HEARTBEAT_MS,
                *(["--cut"] if cut else []), *(["--wait", wait] if wait else []))
    assert_steps_went_on(run, 2)
    # A rank whose node does not reach the leader saw one outage: with the
    # leader stopped, both ranks; with a follower stopped or cut off, its
    # rank alone (the leader is not declaring it failed yet, and its own
    # rank must not notice it).
    assert run["outages"] == ([1, 1] if node == 0 else [0, 1]), run["outages"]
    # Each met it in a report, which waited the bound (and then no more).
    for rank, outages in enumerate(run["outages"]):
        held = sum(run["report_seconds"][rank][2:])
        assert not outages or held >= REPORT_TIMEOUT - 0.1, (rank, held)
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
