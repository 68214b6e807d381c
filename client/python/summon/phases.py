"""The phase machine as a trainer walks it (R16), for summon.torch's Trainer
re-establishing its ranks' phases after summond could not hear it."""

from __future__ import annotations

from summon.errors import SummonError

PHASES = ("IDLE", "FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER")


def unreachable(error: SummonError) -> bool:
    """Whether a trainer call failed because summond (or the leader behind it)
    did not answer, not because it refused: a move blocked by a writable
    session (R3) past its wait is DEADLINE_EXCEEDED too, but says why."""
    if error.code == "DEADLINE_EXCEEDED":
        return "cannot move" not in str(error)
    return error.code in ("UNAVAILABLE", "CANCELLED")


def phase_path(start: str, target: str) -> list[str]:
    """The moves taking a rank from `start` (where summond has it) to `target`
    (where the trainer is). The same phase is re-asserted once (ReportPhase
    with `reestablishing`); a target behind the start is reached through
    IDLE, along legal moves only."""
    start, target = start.upper(), target.upper()
    if start == target:
        return [target]
    path: list[str] = []
    current = start
    if PHASES.index(target) < PHASES.index(current):
        if current == "BETWEEN":
            path.append("BACKWARD")
        path.append("IDLE")
        current = "IDLE"
    while current != target:
        current = PHASES[PHASES.index(current) + 1]
        path.append(current)
    return path
