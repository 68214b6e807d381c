"""Fixtures of the Python client's tests: summond child processes.

Run in summon's Python environment: `scripts/python -m pytest tests/python`
(scripts/setup builds it; another interpreter is refused with that hint).

The daemon is $SUMMON_DAEMON, else bazel-bin/server/summond (scripts/test
builds it first). Each daemon gets its own --data-dir under pytest's tmp dir,
so shared-memory names never clash, and binds port 0.
"""

from __future__ import annotations

import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]


def _require_summon_environment() -> None:
    """Refuses, with the way out, an interpreter without summon's pins (e.g.
    Debian's torch 1.13 and protobuf 3, which the stubs cannot run on)."""
    wanted = {"torch": 2, "protobuf": 7, "grpcio-tools": 1}
    found = {}
    for name in wanted:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "none"
    if any(not v[0].isdigit() or int(v.split(".")[0]) < wanted[n] for n, v in found.items()):
        raise pytest.UsageError(
            f"{sys.executable} has {found}; run the tests in summon's Python "
            "environment: scripts/python -m pytest ... (scripts/setup builds it)")


_require_summon_environment()
sys.path.insert(0, str(REPO / "client" / "python"))

import summon  # noqa: E402
from summon.local import LocalDaemon, daemon_binary  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if not Path(daemon_binary()).is_file():
        raise pytest.UsageError(
            f"no summond at {daemon_binary()}: run `bazel build //server:summond` "
            "or set SUMMON_DAEMON")


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., LocalDaemon]]:
    """start_daemon(local_ranks=2, unix_socket=False, **kw) -> a running LocalDaemon."""
    daemons: list[LocalDaemon] = []

    def start(local_ranks: int = 2, unix_socket: bool = False, **options) -> LocalDaemon:
        data_dir = tmp_path / f"daemon{len(daemons)}"
        data_dir.mkdir()
        # A short socket path: sun_path holds 108 bytes.
        socket = tempfile.mktemp(prefix="summon-", suffix=".sock", dir="/tmp")
        daemon = LocalDaemon(local_ranks=local_ranks, data_dir=str(data_dir),
                             unix_socket=socket if unix_socket else None, **options)
        daemons.append(daemon)
        return daemon.start()

    yield start
    for daemon in daemons:
        daemon.close()


@pytest.fixture
def daemon(start_daemon: Callable[..., LocalDaemon]) -> LocalDaemon:
    return start_daemon(local_ranks=2)


@pytest.fixture
def client(daemon: LocalDaemon) -> Iterator[summon.Client]:
    with summon.Client(daemon.address, timeout=30) as c:
        yield c


@pytest.fixture
def chromium() -> Iterator[Callable[..., object]]:
    """Starts headless Chromium through selenium with the given extra
    arguments (skipping the test where selenium or chromedriver is missing);
    every browser it started is closed at the end of the test."""
    try:
        from selenium import webdriver
    except ImportError:
        pytest.skip("no selenium: scripts/setup (client/python/requirements.txt)")
    import shutil
    chromedriver = shutil.which("chromedriver")
    if chromedriver is None:
        pytest.skip("no chromedriver: apt-get install chromium chromium-driver")
    drivers = []

    def start(*extra_args: str) -> object:
        options = webdriver.ChromeOptions()
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--window-size=1200,900", *extra_args):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        drivers.append(webdriver.Chrome(service=webdriver.ChromeService(chromedriver),
                                        options=options))
        return drivers[-1]

    yield start
    for driver in drivers:
        driver.quit()
