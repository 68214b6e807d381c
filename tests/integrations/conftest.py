"""Fixtures of the integration tests: the FSDP conformance suite's, reused.

tests/fsdp_conformance/conftest.py starts the summonds (`daemons`), runs jobs
(`run_job`) and compares sessions bit for bit (`assert_session_equals`); it
is loaded here under its own name, and jobs run this directory's worker.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "fsdp_conformance_fixtures", HERE.parent / "fsdp_conformance" / "conftest.py")
base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = base
_spec.loader.exec_module(base)

pytest.importorskip("transformers")

daemons = base.daemons
pytest_configure = base.pytest_configure
WORKER = HERE / "worker.py"


def run(daemon, world: int, cases: list[dict], out: Path) -> None:
    """One framework job of `world` ranks running `cases` (worker.py)."""
    base.run_job(daemon, world, cases, out, timeout=400, script=WORKER)
