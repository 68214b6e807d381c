"""R24's bound, timed, for summon.torch's hand-written trainer on one node:
while summond is stopped (SIGSTOP) no step waits longer than the trainer's
report_timeout (2 s by default), once per outage, whatever the R3 wait and
whichever phase the trainer is in; while summond runs, a writable session
holds the next step for as long as it is open (R3), and not longer."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
import torch

import summon
import summon.torch as st
from summon.local import LinkProxy, LocalDaemon

REPORT_TIMEOUT = 2.0  # summon.torch.Trainer's default: R24's bound
WORK = 0.02           # seconds of "compute" per half step
# Scheduling allowance on top of the bound (and of the steps' own WORK), not
# part of it: the calls a live summond answers take 5-20 ms a step here, and
# a timer fires late on a loaded 2-core machine shared with builds (measured:
# the step that meets the outage ends 2.04-2.06 s after the one before).
ALLOWANCE = 0.25


@pytest.fixture
def daemon(start_daemon: Callable[..., LocalDaemon]) -> Iterator[LocalDaemon]:
    daemon = start_daemon(local_ranks=2)
    yield daemon
    if daemon.process is not None:  # never leave it stopped
        daemon.process.send_signal(signal.SIGCONT)


@pytest.fixture
def model(client: summon.Client) -> str:
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    st.register(client, "bound", net, [net[0], net[1]])
    return "bound"


def stopped(pid: int) -> None:
    """Returns once every thread of `pid` is stopped: SIGSTOP is delivered
    asynchronously, and a call can still be answered right after kill()."""
    deadline = time.monotonic() + 5
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that ended
        if all(state == "T" for state in states):
            return
        assert time.monotonic() < deadline, f"summond {pid} did not stop: {states}"
        time.sleep(0.001)


class Stop:
    """summond SIGSTOPped now and SIGCONTed `seconds` later; `window` is
    (stopped, resumed) in time.monotonic()."""

    def __init__(self, daemon: LocalDaemon, seconds: float):
        assert daemon.process is not None
        self.process = daemon.process
        self.process.send_signal(signal.SIGSTOP)
        stopped(self.process.pid)
        self.window = (time.monotonic(), time.monotonic() + seconds)
        self._timer = threading.Timer(seconds, self.process.send_signal, (signal.SIGCONT,))
        self._timer.start()

    def running(self) -> bool:
        return time.monotonic() < self.window[1]

    def join(self) -> None:
        self._timer.join()


def one_step(trainer: st.Trainer, n: int) -> float:
    """A whole step (every phase); returns when it ended (time.monotonic())."""
    with trainer.step(n) as step:
        time.sleep(WORK)
        step.backward()
        time.sleep(WORK)
        step.optimizer()
    return time.monotonic()


def settle(trainer: st.Trainer, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while trainer.interlock_unknown:
        assert time.monotonic() < deadline, "the phases were never re-established"
        time.sleep(0.05)


def phases(client: summon.Client, model: str) -> list[str]:
    return [r.phase for r in client.describe_model(model).ranks]


@pytest.mark.parametrize("wait", [None, 60.0], ids=["attach-defaults", "serve-wait-60"])
def test_a_stopped_summond_holds_a_step_at_most_the_bound_once(
        daemon: LocalDaemon, client: summon.Client, model: str,
        wait: Optional[float]) -> None:
    """6 s of SIGSTOP, three times the bound: steps go on all through it."""
    with st.attach(client, model, [0, 1], wait=wait) as trainer:
        train_through(trainer, lambda: Stop(daemon, 6.0), client, model)


def train_through(trainer: st.Trainer, outage: Callable[[], Any], client: summon.Client,
                  model: str) -> None:
    """Steps before, during and after `outage()` (its `window`, `running()`
    and `join()`): the first step in it waits up to the bound, the rest do
    not wait at all, many end during it, and the phases come back after."""
    last = one_step(trainer, 1)
    cut = outage()
    held_before = trainer.report_seconds
    durations, n = [], 2
    while cut.running():
        end = one_step(trainer, n)
        if end < cut.window[1]:
            durations.append(end - last)
            held = trainer.report_seconds - held_before
        last, n = end, n + 1
    cut.join()
    assert len(durations) >= 10, f"{len(durations)} steps ended during the outage: {durations}"
    print(f"{len(durations)} steps during the outage; the longest took "
          f"{max(durations):.2f} s, the next {sorted(durations)[-2]:.3f} s; "
          f"{held:.2f} s in phase reports")
    # One step waits for the bound; every other goes at its own pace.
    assert max(durations) <= REPORT_TIMEOUT + 2 * WORK + ALLOWANCE, durations
    assert sorted(durations)[-2] <= 2 * WORK + ALLOWANCE, durations
    # The reports of every step during the outage held training the bound,
    # once, in all (not once per move or per step).
    assert REPORT_TIMEOUT - 0.1 <= held <= REPORT_TIMEOUT + ALLOWANCE, held
    assert trainer.outages == 1
    settle(trainer)
    assert phases(client, model) == ["IDLE", "IDLE"]
    with trainer.step(n) as step:
        assert phases(client, model) == ["FORWARD", "FORWARD"]
        step.optimizer()


class Proxy(LinkProxy):
    """summon.local.LinkProxy as an outage for train_through: cut for
    `seconds`, then healed."""

    def cut_for(self, seconds: float) -> "Proxy":
        self.cut()
        self.window = (time.monotonic(), time.monotonic() + seconds)
        self._timer = threading.Timer(seconds, self.heal)
        self._timer.start()
        return self

    def running(self) -> bool:
        return time.monotonic() < self.window[1]

    def join(self) -> None:
        self._timer.join()


def test_a_cut_network_holds_a_step_at_most_the_bound_once(
        daemon: LocalDaemon, client: summon.Client, model: str) -> None:
    """The trainer's link to summond black-holed 6 s (summond runs on and
    hears nothing: after half a lease it takes the phases as unknown), with
    serve's wait (60 s): the same bound, once."""
    assert daemon.port is not None
    proxy = Proxy(daemon.port)
    try:
        with summon.Client(f"127.0.0.1:{proxy.port}", timeout=30) as through, \
                st.attach(through, model, [0, 1], wait=60.0) as trainer:
            train_through(trainer, lambda: proxy.cut_for(6.0), client, model)
    finally:
        proxy.close()


MOVES = ["FORWARD", "BETWEEN", "BACKWARD", "OPTIMIZER", "IDLE"]


def test_in_every_phase_a_stopped_summond_holds_the_next_move_at_most_the_bound(
        daemon: LocalDaemon, client: summon.Client, model: str) -> None:
    """Stopped before each move of a step in turn (serve's wait, 60 s;
    report_timeout 0.5 s, a 2 s stop): that move returns within the bound,
    later moves at once, and summond has the ranks where the trainer is once
    it runs again, mid-step too."""
    bound = 0.5
    with st.attach(client, model, [0, 1], wait=60.0, report_timeout=bound,
                   lease_seconds=4) as trainer:
        for index, stopped_before in enumerate(MOVES):
            taken = {}
            stop = None
            for move in MOVES:
                if move == stopped_before:
                    stop = Stop(daemon, 2.0)
                start = time.monotonic()
                trainer.report(move, step=index + 1 if move == "FORWARD" else None)
                taken[move] = time.monotonic() - start
            assert stop is not None and stop.running(), "the step outlasted the stop"
            assert taken[stopped_before] <= bound + ALLOWANCE, (stopped_before, taken)
            later = MOVES[MOVES.index(stopped_before) + 1:]
            assert all(taken[m] <= 0.1 for m in later), (stopped_before, taken)
            assert trainer.outages == index + 1
            stop.join()
            settle(trainer)
            assert phases(client, model) == ["IDLE", "IDLE"]
        # Stopped with the trainer mid-step: re-established there.
        trainer.report("FORWARD", step=10)
        trainer.report("BETWEEN")
        stop = Stop(daemon, 2.0)
        trainer.report("BACKWARD")
        stop.join()
        settle(trainer)
        assert phases(client, model) == ["BACKWARD", "BACKWARD"]
        trainer.report("IDLE")
        assert trainer.outages == len(MOVES) + 1


def test_r3_a_writable_session_holds_the_next_step_as_long_as_it_is_open(
        client: summon.Client, model: str) -> None:
    """serve's default wait (60 s) with summond running: a session open
    for 3 s more delays the step by about 3 s, not by the wait."""
    with st.attach(client, model, [0, 1], wait=60.0) as trainer:
        one_step(trainer, 1)
        session = client.open_session(model, scope="1")  # writable
        opened = time.monotonic()
        closer = threading.Timer(3.0, client.close_session, (session.id,))
        closer.start()
        with trainer.step(2) as step:
            entered = time.monotonic()
            assert phases(client, model) == ["FORWARD", "FORWARD"]
            waited_ms = step.waited_ms
        closer.join()
        assert 2.9 <= entered - opened <= 3.5, entered - opened
        assert 2800 <= waited_ms <= 3500, waited_ms
        assert trainer.outages == 0


def test_r3_a_wait_ends_within_the_bound_when_summond_stops(
        daemon: LocalDaemon, client: summon.Client, model: str) -> None:
    """A step waiting for a writable session (R3) waits while summond
    answers; stopped 1 s into the wait, the step goes on within the bound
    (interlock unknown: R24 before R3)."""
    with st.attach(client, model, [0, 1], wait=60.0) as trainer:
        session = client.open_session(model, scope="1")
        timer = threading.Timer(1.0, lambda: holder.append(Stop(daemon, 6.0)))
        holder: list[Stop] = []
        timer.start()
        start = time.monotonic()
        with trainer.step(1) as step:
            entered = time.monotonic()
            step.optimizer()
        timer.join()
        stop = holder[0]
        assert stop.running(), "the step outlasted the stop"
        assert entered - stop.window[0] <= REPORT_TIMEOUT + ALLOWANCE, entered - start
        assert entered - start >= 1.0  # it did wait while summond answered
        assert trainer.outages == 1
        stop.join()
        client.close_session(session.id)
        settle(trainer)
        assert phases(client, model) == ["IDLE", "IDLE"]
