"""The phase machine as a trainer walks it (R16), re-establishing a
trainer's phases after summond could not hear it, and PhaseKeeper: a
trainer's phase reports, never holding a step for summond (R24).
summon.torch's Trainer reports through a PhaseKeeper from its training
thread and re-establishes from its heartbeat thread."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional, Protocol, Sequence

from summon.errors import SummonError
from summon.messages import PhaseReport


class TrainerClient(Protocol):
    """The calls this module makes: summon.Client's trainer calls
    (summon/trainer_calls.py). A protocol, so that this module, which those
    calls use, does not import the client back."""

    def attach(self, *args: Any, **kwargs: Any) -> Any: ...

    def renew(self, *args: Any, **kwargs: Any) -> Any: ...

    def report_phase(self, *args: Any, **kwargs: Any) -> PhaseReport: ...


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


def reestablish(client: TrainerClient, model: str, ranks: Sequence[int], incarnation: str,
                lease_seconds: int, lease_id: str, phase: str, step: Optional[int],
                timeout: float, current: Callable[[], bool] = lambda: True) -> str:
    """Tells summond that every rank of `ranks` is in `phase` (at `step`), after
    the trainer moved them unheard; returns the lease id (a new one when the
    old lease lapsed meanwhile). summond refuses sessions on the model from
    the first call (phases_unknown) to the last (phases_reestablished), so no
    session sees a rank half-way. Raises SummonError when summond still does
    not answer, or refuses a move (R3: a writable session holds a unit).
    current(): whether `phase` still is where the trainer is; when it no
    longer is (it moved on unheard meanwhile), the phases are not declared
    re-established and the caller tries again."""
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
    if current():
        client.renew(attachment.lease_id, timeout, phases_reestablished=True)
    return attachment.lease_id


_log = logging.getLogger("summon.torch")

# How long a deferred move (PhaseKeeper.defer) waits for the next move to
# carry it before it is reported alone: far longer than a training loop's
# forward-to-backward gap (the loss), short beside a person or a crash.
DEFER_SECONDS = 0.05


class PhaseKeeper:
    """Where a trainer's ranks are, and telling summond (R24).

    report() is the training thread's move. Each call to summond is bounded
    by `report_timeout`; the R3 wait is asked for in slices within it
    (Client.report_phase), so a writable session may hold a move for as
    long as summond keeps answering, and a summond (or leader, or network)
    that does not answer holds it `report_timeout` at most, once per outage:
    the interlock is then unknown and every further move is the trainer's
    alone (no call) until reestablish() (the heartbeat thread) told summond
    where the ranks are. A re-establishment holds the moves meanwhile, but
    never longer than `report_timeout` once per outage: a move that cannot
    wait goes on unheard and the re-establishment starts again.

    defer() moves to BETWEEN without a call: the next move (BACKWARD, at the
    backward's start) carries it (one ReportPhase with `through`), or, when
    no move comes within `DEFER_SECONDS`, a background thread reports it
    alone. BETWEEN writes nothing and summond meanwhile has the rank in
    FORWARD, which refuses at least what BETWEEN does (R1, R3, R4): every
    move into a phase that writes shards is still answered before it writes.
    """

    def __init__(self, client: TrainerClient, model: str, ranks: Sequence[int],
                 incarnation: str, lease_seconds: int, lease_id: str,
                 report_timeout: float):
        self.client = client
        self.model = model
        self.ranks = list(ranks)
        self.incarnation = incarnation
        self.lease_seconds = lease_seconds
        self.lease_id = lease_id
        self.report_timeout = report_timeout
        self.phase = "IDLE"
        self.step: Optional[int] = None
        # Set while summond may not know where the ranks are; `outages`
        # counts the times it was set.
        self.interlock_unknown = False
        self.outages = 0
        # Seconds report() has held the training thread, all calls together
        # (R24 bounds what an outage adds to it: report_timeout, once).
        self.held_seconds = 0.0
        # Moves made while summond did not hear them (a re-establishment
        # that started before one is out of date).
        self._unheard = 0
        # A re-establishment kept a move waiting report_timeout in this
        # outage: further moves do not wait for it again.
        self._waited_out = False
        # Held through calls to summond about phases (a move, a
        # re-establishment); _state guards the fields, never across a call.
        self._calls = threading.Lock()
        self._state = threading.Lock()
        # A move made but not yet told to summond (defer()) and when it is
        # due alone; guarded by _state, taken only while holding _calls.
        self.deferred: Optional[str] = None
        self._due = 0.0
        self._wake = threading.Condition(self._state)
        self._flusher: Optional[threading.Thread] = None
        self._closed = False

    def lose_interlock(self, error: object) -> None:
        """summond did not answer (`error`): the interlock is unknown."""
        with self._state:
            self._lose(error)

    def _lose(self, error: object) -> None:
        if not self.interlock_unknown:
            self.outages += 1
            _log.warning("summond did not answer (%s); model %s: training goes on, "
                         "interlock unknown until it answers", error, self.model)
        self.interlock_unknown = True

    def _move_unheard(self, phase: str) -> list[PhaseReport]:
        self.phase = phase
        self.deferred = None
        self._unheard += 1
        return []

    def defer(self, phase: str) -> None:
        """Moves every rank to `phase` (BETWEEN) without a call (see the class)."""
        with self._state:
            if self.interlock_unknown:  # the heartbeat thread tells summond later
                self._move_unheard(phase.upper())
                return
            self.phase = self.deferred = phase.upper()
            self._due = time.monotonic() + DEFER_SECONDS
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                                 name=f"summon-phases-{self.model}")
                self._flusher.start()
            self._wake.notify()

    def _flush_loop(self) -> None:
        """Reports a deferred move alone once it is due (the background thread)."""
        while True:
            with self._state:
                while not self._closed and (self.deferred is None
                                            or time.monotonic() < self._due):
                    self._wake.wait(None if self.deferred is None
                                    else self._due - time.monotonic())
                if self._closed:
                    return
            with self._calls:
                with self._state:
                    phase, self.deferred = self.deferred, None
                if phase is None:
                    continue  # the training thread's move carried it
                try:
                    self._report_heard(phase, None, None)
                except SummonError as error:
                    # The training thread's next move carries it again and
                    # meets the refusal itself.
                    _log.warning("model %s: %s reported late: %s", self.model, phase, error)
                    with self._state:
                        if self.deferred is None and self.phase == phase:
                            self.deferred, self._due = phase, float("inf")

    def close(self) -> None:
        """Stops the background thread (a deferred move is dropped: the
        caller ends the lease or reports again)."""
        with self._state:
            self._closed = True
            self._wake.notify()
        if self._flusher is not None:
            self._flusher.join()

    def report(self, phase: str, step: Optional[int], deadline_ms: Optional[int],
               through: Optional[str] = None,
               publish_step: Optional[int] = None) -> list[PhaseReport]:
        """Moves every rank to `phase`: all or none for a refused move into a
        step (SummonError); unheard, [] returned, when summond does not answer.
        through: a move made first in the same call (BETWEEN or IDLE).
        publish_step: with the end of a step (OPTIMIZER -> IDLE), each rank's
        report asks summond to publish that version (Client.report_phase).
        A move made unheard asks nothing: that step is not published."""
        start = time.monotonic()
        try:
            return self._report(phase.upper(), step, deadline_ms,
                                through.upper() if through else None, publish_step)
        finally:
            held = time.monotonic() - start
            with self._state:
                self.held_seconds += held

    def _report(self, phase: str, step: Optional[int], deadline_ms: Optional[int],
                through: Optional[str],
                publish_step: Optional[int] = None) -> list[PhaseReport]:
        with self._state:
            if step is not None:
                self.step = step
            if self.interlock_unknown and self._waited_out:
                return self._move_unheard(phase)
        # A re-establishment in progress holds the calls; waiting for it
        # longer than one call may take would let a stopped summond hold
        # the step.
        if not self._calls.acquire(timeout=self.report_timeout):
            with self._state:
                self._waited_out = True
                self._lose("phases still being re-established after "
                           f"{self.report_timeout} s")
                return self._move_unheard(phase)
        try:
            with self._state:
                if self.interlock_unknown:  # the heartbeat thread tells summond later
                    return self._move_unheard(phase)
                through, self.deferred = through or self.deferred, None
            return self._report_heard(phase, step, deadline_ms, through, publish_step)
        finally:
            self._calls.release()

    def _report_heard(self, phase: str, step: Optional[int], deadline_ms: Optional[int],
                      through: Optional[str] = None,
                      publish_step: Optional[int] = None) -> list[PhaseReport]:
        """through: a deferred move summond has not heard, made first in the same call."""
        reports: list[PhaseReport] = []
        extra: dict[str, Any] = {}
        if through is not None:
            extra["through"] = through
        if publish_step is not None:
            extra["publish_step"] = publish_step
        for rank in self.ranks:
            try:
                reports.append(self.client.report_phase(
                    self.model, rank, phase, step, deadline_ms, self.lease_id,
                    timeout=self.report_timeout, **extra))
            except SummonError as error:
                if unreachable(error):  # never hold the step
                    with self._state:
                        self._lose(error)
                        return self._move_unheard(phase)
                if phase == "FORWARD" and self.phase == "IDLE":
                    self._roll_back(self.ranks[:len(reports)])
                raise
        with self._state:
            self.phase = phase
        return reports

    def _roll_back(self, moved: Sequence[int]) -> None:
        """A move into a step was refused for a later rank: the ranks that
        moved go back to IDLE (all ranks or none)."""
        for rank in moved:
            try:
                self.client.report_phase(self.model, rank, "IDLE", lease_id=self.lease_id,
                                         timeout=self.report_timeout)
            except SummonError as error:
                if not unreachable(error):
                    raise
                self.lose_interlock(error)  # IDLE is where the trainer is
                return

    def reestablish(self) -> bool:
        """Tells summond where every rank is (summon.phases.reestablish).
        False when the trainer moved on meanwhile: call again at once; True
        when done or when summond did not answer (the interlock stays
        unknown: again at the next heartbeat)."""
        with self._calls:
            with self._state:
                phase, step, unheard = self.phase, self.step, self._unheard
                self.deferred = None  # re-established to where the trainer is
            try:
                self.lease_id = reestablish(
                    self.client, self.model, self.ranks, self.incarnation,
                    self.lease_seconds, self.lease_id, phase, step, self.report_timeout,
                    current=lambda: self._unheard == unheard)
            except SummonError as error:
                _log.warning("model %s: phases not re-established yet: %s", self.model, error)
                with self._state:
                    self.interlock_unknown = True
                return True
            with self._state:
                # summond answered every call: moves may wait for it again.
                self._waited_out = False
                if self._unheard != unheard:
                    self.interlock_unknown = True
                    return False
                if self.interlock_unknown:
                    _log.warning("model %s: phases re-established (%s)", self.model, phase)
                self.interlock_unknown = False
                return True
