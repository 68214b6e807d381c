"""How many ReportPhase calls a step makes (issue 35): BETWEEN and BACKWARD in
one call (ReportPhaseRequest.through), a deferred BETWEEN carried by the
backward's move or reported alone within DEFER_SECONDS, and what summond
shows after each."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
import torch

import summon
import summon.phases
import summon.torch as st


# The way back to IDLE along the phase machine (R16), from each phase.
BACK_TO_IDLE = {"IDLE": [], "FORWARD": ["IDLE"], "BETWEEN": ["BACKWARD", "IDLE"],
                "BACKWARD": ["IDLE"], "OPTIMIZER": ["IDLE"]}


@pytest.fixture
def model(client: summon.Client) -> Iterator[str]:
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    st.register(client, "t", net, [net[0], net[1]])
    yield "t"
    # Ranks left mid-step would refuse the delete (R15), and the model's
    # shared memory would outlive the daemon.
    for rank, phase in enumerate(phases(client, "t")):
        for step in BACK_TO_IDLE[phase]:
            client.report_phase("t", rank, step)
    client.delete_model("t")


def phases(client: summon.Client, model: str) -> list[str]:
    return [r.phase for r in client.describe_model(model).ranks]


def count_calls(client: summon.Client, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Every ReportPhase the client sends: (rank, through, phase)."""
    calls: list[tuple] = []
    original = client.report_phase

    def counted(model: str, rank: int, phase: str, *args: Any, **kwargs: Any) -> Any:
        calls.append((rank, kwargs.get("through"), phase.upper()))
        return original(model, rank, phase, *args, **kwargs)

    monkeypatch.setattr(client, "report_phase", counted)
    return calls


def test_a_combined_report_is_two_moves_in_one_call(client: summon.Client,
                                                    model: str) -> None:
    client.report_phase(model, 0, "FORWARD", step=4)
    report = client.report_phase(model, 0, "BACKWARD", through="BETWEEN")
    assert (report.previous_phase, report.phase, report.step) == ("FORWARD", "BACKWARD", 4)
    assert phases(client, model) == ["BACKWARD", "IDLE"]
    # Each move is checked as its own report would be (R16): IDLE -> BETWEEN
    # is illegal, and nothing moves.
    with pytest.raises(summon.SummonError) as illegal:
        client.report_phase(model, 1, "BACKWARD", through="BETWEEN")
    assert illegal.value.code == "FAILED_PRECONDITION" and "IDLE to BETWEEN" in \
        illegal.value.message
    assert phases(client, model) == ["BACKWARD", "IDLE"]
    with pytest.raises(ValueError):  # a first move R3 could block
        client.report_phase(model, 1, "BETWEEN", through="FORWARD")


def test_a_refused_second_move_leaves_the_rank_in_the_first(client: summon.Client,
                                                            model: str) -> None:
    client.report_phase(model, 0, "FORWARD")
    with pytest.raises(summon.SummonError) as illegal:  # BETWEEN -> OPTIMIZER (R16)
        client.report_phase(model, 0, "OPTIMIZER", through="BETWEEN")
    assert illegal.value.code == "FAILED_PRECONDITION" and "BETWEEN to OPTIMIZER" in \
        illegal.value.message
    assert phases(client, model) == ["BETWEEN", "IDLE"]


def test_a_step_makes_four_calls_per_rank(client: summon.Client, model: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(client, monkeypatch)
    with st.attach(client, model, [0, 1], lease_seconds=5) as trainer:
        with trainer.step(1) as step:
            step.backward()
            assert phases(client, model) == ["BACKWARD", "BACKWARD"]
            step.optimizer()
        assert phases(client, model) == ["IDLE", "IDLE"]
        assert calls == [(r, through, phase) for through, phase in (
            (None, "FORWARD"), ("BETWEEN", "BACKWARD"), (None, "OPTIMIZER"), (None, "IDLE"))
            for r in (0, 1)]
        # between() as asked stays its own call (sessions open in BETWEEN).
        del calls[:]
        with trainer.step(2) as step:
            step.between()
            assert phases(client, model) == ["BETWEEN", "BETWEEN"]
            step.backward()
        assert [c[1:] for c in calls[::2]] == [(None, "FORWARD"), (None, "BETWEEN"),
                                               (None, "BACKWARD"), (None, "IDLE")]


def test_a_deferred_between_rides_the_next_move_or_goes_alone(
        client: summon.Client, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(client, monkeypatch)
    with st.attach(client, model, [0], lease_seconds=5) as trainer:
        with trainer.step(1) as step:
            step.between(defer=True)
            assert trainer.phase == "BETWEEN"
            step.backward()  # at once: one call carries both moves
        assert calls == [(0, None, "FORWARD"), (0, "BETWEEN", "BACKWARD"), (0, None, "IDLE")]
        del calls[:]
        monkeypatch.setattr(summon.phases, "DEFER_SECONDS", 0.5)
        with trainer.step(2) as step:
            start = time.monotonic()
            step.between(defer=True)
            assert phases(client, model)[0] == "FORWARD"  # not told yet
            while phases(client, model)[0] != "BETWEEN":  # alone, from the thread
                assert time.monotonic() < start + 5
                time.sleep(0.005)
            assert time.monotonic() - start >= 0.5
            step.backward()
        assert calls == [(0, None, "FORWARD"), (0, None, "BETWEEN"), (0, None, "BACKWARD"),
                         (0, None, "IDLE")]
        # A step that ends in the deferred BETWEEN: BACKWARD carries it.
        del calls[:]
        with trainer.step(3) as step:
            step.between(defer=True)
        assert calls == [(0, None, "FORWARD"), (0, "BETWEEN", "BACKWARD"), (0, None, "IDLE")]
        assert phases(client, model) == ["IDLE", "IDLE"]
