"""The phase machine as a trainer walks it (R16), and re-establishing a
trainer's phases after summond could not hear it (R24); summon.torch's
Trainer uses it from its heartbeat thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from summon.errors import SummonError

if TYPE_CHECKING:
    from summon.client import Client

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


def reestablish(client: "Client", model: str, ranks: Sequence[int], incarnation: str,
                lease_seconds: int, lease_id: str, phase: str, step: Optional[int],
                timeout: float) -> str:
    """Tells summond that every rank of `ranks` is in `phase` (at `step`), after
    the trainer moved them unheard; returns the lease id (a new one when the
    old lease lapsed meanwhile). summond refuses sessions on the model from
    the first call (phases_unknown) to the last (phases_reestablished), so no
    session sees a rank half-way. Raises SummonError when summond still does
    not answer, or refuses a move (R3: a writable session holds a unit)."""
    try:
        client.renew(lease_id, timeout, phases_unknown=True)
    except SummonError as error:
        if unreachable(error):
            raise
        # The lease ended (lapsed): the attach below takes a new one.
    # Resumes the lease: the same incarnation holding the same ranks.
    attachment = client.attach(model, ranks, incarnation, lease_seconds, timeout=timeout)
    daemon_phases = {state.rank: state.phase for state in attachment.ranks}
    for rank in ranks:
        for move in phase_path(daemon_phases.get(rank, "IDLE"), phase):
            client.report_phase(model, rank, move, step, lease_id=attachment.lease_id,
                                timeout=timeout, reestablishing=True)
    client.renew(attachment.lease_id, timeout, phases_reestablished=True)
    return attachment.lease_id
